//! Training configurations from YAML/JSON override files, Megatron-LM command lines and whole
//! launch scripts (evaluated as bash would run them), then
//! through the cost model: reading and evaluating must never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use moe_skills::inputs::{parse_megatron_args, read_launch_script};
use moe_skills::model::{evaluate, Architecture, CostConstants, Hardware, TrainingConfig};

fuzz_target!(|text: &str| {
    let arch: Architecture =
        serde_yaml::from_str(include_str!("../../cards/models/deepseek-v3.yaml")).expect("card");
    let hw: Hardware =
        serde_yaml::from_str(include_str!("../../cards/hardware/h100.yaml")).expect("card");
    let k: CostConstants =
        serde_yaml::from_str(include_str!("../../cards/cost-model.yaml")).expect("card");
    for config in [
        moe_skills::inputs::read_yaml(text),
        parse_megatron_args(text),
        read_launch_script(text),
    ]
    .into_iter()
    .flatten()
    {
        let _ = evaluate(&arch, &hw, &k, &config);
    }
});
