//! The cost model: pure arithmetic over an architecture, a GPU, calibrated constants and a
//! training configuration. No I/O, no globals.

pub mod activations;
pub mod arch;
pub mod calibration;
pub mod cluster_calibration;
pub mod cluster_fit;
pub mod config;
pub mod constants;
pub mod estimate;
pub mod fit;
pub mod flops;
pub mod hardware;
pub mod kernels;
pub mod layout;
pub mod limits;
pub mod linears;
pub mod megatron_rules;
pub mod params;
pub mod report;
pub mod routing;
pub mod uncertainty;

pub use arch::{ArchError, Architecture, ValidArchitecture};
pub use config::{
    AttentionBackend, AttentionEnv, ConfigError, Dispatcher, ModelSpec, Precision,
    RecomputeGranularity, RecomputeModule, TrainingConfig,
};
pub use constants::CostConstants;
pub use estimate::{
    evaluate, evaluate_memory_first, evaluate_memory_only, Estimate, FlopsReport, LayoutReport,
    MemoryReport, MoeBlockTime, Performance, TimeBreakdown, Violation,
};
pub use hardware::Hardware;
