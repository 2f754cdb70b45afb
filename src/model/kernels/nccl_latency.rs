//! NCCL's own time model for an all-gather or reduce-scatter whose group spans nodes:
//! per protocol a fixed latency, a latency per ring step (NVLink steps inside a node,
//! network steps between nodes) and a share of the large-message bandwidth; NCCL runs
//! the protocol (and, with one GPU per node, the algorithm) its model finds fastest.
//! Inside one NVLink domain the measured size tables price collectives instead.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::positive;

/// One protocol of NCCL's ring algorithm (LL, LL128, Simple).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RingProtocol {
    pub protocol: String,
    /// Fixed latency of one call, microseconds.
    pub base_us: f64,
    /// Latency of a ring step between two GPUs of one node, microseconds (on an
    /// inter-node ring, never below the per-step network overhead).
    pub intra_step_us: f64,
    /// Latency of a ring step that crosses the network, microseconds.
    pub network_step_us: f64,
    /// The same with one GPU of the group per node (NCCL then takes its tree's network
    /// latency), microseconds.
    pub lone_network_step_us: f64,
    /// Bandwidth the protocol reaches, as a fraction of the large-message rate.
    pub bandwidth_fraction: f64,
    /// A ceiling on the protocol's bus bandwidth across nodes, GB/s, whatever the links
    /// (NCCL's `llMaxBws` for LL): on two nodes and on more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bus_gb_per_s: Option<NodeScaleCeiling>,
}

/// A bandwidth ceiling that NCCL's tuner sets by node count (its `N2` and `N4` scales).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeScaleCeiling {
    pub two_nodes: f64,
    pub more_nodes: f64,
}

impl NodeScaleCeiling {
    /// The ceiling on `nodes` nodes, bytes/s; none where the card's value is not positive
    /// (`problems` reports it).
    fn bytes_per_s(&self, nodes: u32) -> Option<f64> {
        let gb = if nodes <= 2 {
            self.two_nodes
        } else {
            self.more_nodes
        };
        positive(gb).then_some(gb * 1e9)
    }
}

/// NCCL's PAT algorithm, used for all-gather and reduce-scatter when every GPU of the group
/// is on its own node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PatLatency {
    pub base_us: f64,
    /// Linear part, microseconds per rank.
    pub per_rank_us: f64,
    /// Network latency per log2(nodes), microseconds.
    pub log_network_step_us: f64,
    pub bandwidth_fraction: f64,
}

/// NCCL's latency and bandwidth model for all-gather and reduce-scatter across nodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NcclLatencyModel {
    pub source: String,
    pub ring: Vec<RingProtocol>,
    pub pat: PatLatency,
}

impl NcclLatencyModel {
    /// Seconds of one all-gather or reduce-scatter over `ranks` GPUs on `nodes` nodes (the
    /// group's GPUs spread evenly), each GPU sending `traffic_bytes` (the ring's
    /// (n − 1)/n of the message) at best `bytes_per_s`. The fastest of NCCL's options, as
    /// its tuner picks; the plain bandwidth time when nothing in the model is usable.
    pub fn seconds(&self, ranks: u32, nodes: u32, traffic_bytes: f64, bytes_per_s: f64) -> f64 {
        if !positive(bytes_per_s) || traffic_bytes <= 0.0 {
            return 0.0;
        }
        let plain = traffic_bytes / bytes_per_s;
        let ranks = ranks.max(1);
        let nodes = nodes.clamp(1, ranks);
        if ranks < 2 {
            return plain;
        }
        let steps = f64::from(ranks - 1);
        let network_steps = f64::from(nodes - 1);
        let lone = nodes == ranks;
        // Latency plus the traffic at the protocol's share of the rate, under its ceiling.
        let time = |latency_us: f64, fraction: f64, ceiling: Option<f64>| {
            (positive(fraction) && latency_us.is_finite() && latency_us >= 0.0).then(|| {
                let bandwidth = bytes_per_s * fraction;
                latency_us * 1e-6 + traffic_bytes / ceiling.map_or(bandwidth, |c| bandwidth.min(c))
            })
        };
        let ring = self.ring.iter().filter_map(|p| {
            let network_step = if lone {
                p.lone_network_step_us
            } else {
                p.network_step_us
            };
            let latency = p.base_us
                + (steps - network_steps) * p.intra_step_us
                + network_steps * network_step;
            let ceiling = p.max_bus_gb_per_s.and_then(|c| c.bytes_per_s(nodes));
            time(latency, p.bandwidth_fraction, ceiling)
        });
        let pat = lone
            .then(|| {
                let log_nodes = f64::from(nodes).log2().floor();
                let latency = self.pat.base_us
                    + log_nodes * self.pat.log_network_step_us
                    + f64::from(ranks) * self.pat.per_rank_us;
                time(latency, self.pat.bandwidth_fraction, None)
            })
            .flatten();
        ring.chain(pat).reduce(f64::min).unwrap_or(plain)
    }

    /// What is wrong with the model, if anything.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.ring.is_empty() {
            out.push("ring: at least one protocol is needed".to_string());
        }
        let latency_ok = |v: f64| v.is_finite() && v >= 0.0;
        let fraction_ok = |v: f64| positive(v) && v <= 1.0;
        for p in &self.ring {
            if ![
                p.base_us,
                p.intra_step_us,
                p.network_step_us,
                p.lone_network_step_us,
            ]
            .into_iter()
            .all(latency_ok)
            {
                out.push(format!(
                    "ring protocol {}: latencies must be finite and not negative",
                    p.protocol
                ));
            }
            if !fraction_ok(p.bandwidth_fraction) {
                out.push(format!(
                    "ring protocol {}: bandwidth_fraction must be in (0, 1]",
                    p.protocol
                ));
            }
            if let Some(c) = p.max_bus_gb_per_s {
                if !(positive(c.two_nodes) && positive(c.more_nodes)) {
                    out.push(format!(
                        "ring protocol {}: max_bus_gb_per_s must be positive on two nodes and on more",
                        p.protocol
                    ));
                }
            }
        }
        let pat = &self.pat;
        if ![pat.base_us, pat.per_rank_us, pat.log_network_step_us]
            .into_iter()
            .all(latency_ok)
        {
            out.push("pat: latencies must be finite and not negative".to_string());
        }
        if !fraction_ok(pat.bandwidth_fraction) {
            out.push("pat: bandwidth_fraction must be in (0, 1]".to_string());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NCCL's defaults for x86 hosts (the card's values).
    fn nccl() -> NcclLatencyModel {
        let p = |protocol: &str, base, intra, net, lone, bw| RingProtocol {
            protocol: protocol.into(),
            base_us: base,
            intra_step_us: intra,
            network_step_us: net,
            lone_network_step_us: lone,
            bandwidth_fraction: bw,
            max_bus_gb_per_s: None,
        };
        NcclLatencyModel {
            source: "test".into(),
            ring: vec![
                p("ll", 6.6, 1.0, 2.7, 5.0, 0.5),
                p("ll128", 14.0, 1.9, 4.0, 8.5, 0.92),
                p("simple", 8.4, 3.4, 14.0, 14.0, 1.0),
            ],
            pat: PatLatency {
                base_us: 8.0,
                per_rank_us: 2.8,
                log_network_step_us: 4.0,
                bandwidth_fraction: 0.75,
            },
        }
    }

    #[test]
    fn a_small_message_pays_the_ring_latency_of_the_fastest_protocol() {
        // 64 GPUs on 8 nodes, 8 MB reduce-scatter at 50 GB/s: traffic 8e6·63/64.
        let traffic = 8e6 * 63.0 / 64.0;
        let t = nccl().seconds(64, 8, traffic, 50e9);
        // LL128: 14 + 56·1.9 + 7·4.0 = 148.4 us, plus traffic / (0.92·50 GB/s).
        let ll128 = 148.4e-6 + traffic / (0.92 * 50e9);
        // Simple: 8.4 + 56·3.4 + 7·14 = 296.8 us plus traffic / 50 GB/s — slower here.
        let simple = 296.8e-6 + traffic / 50e9;
        assert!((t - ll128).abs() < 1e-12, "{t} vs {ll128}");
        assert!(simple > ll128);
        // The bus bandwidth this gives, about half the large-message rate (nccl#1531
        // measured ~25 GB/s on 64 H800 at 8 MB).
        let bus = traffic / t / 1e9;
        assert!((23.0..27.0).contains(&bus), "{bus}");
    }

    /// NCCL's x86 LL ceiling across nodes (`llMaxBws`).
    fn nccl_with_ll_ceiling() -> NcclLatencyModel {
        let mut m = nccl();
        m.ring[0].max_bus_gb_per_s = Some(NodeScaleCeiling {
            two_nodes: 39.0,
            more_nodes: 20.4,
        });
        m
    }

    #[test]
    fn ll_never_passes_its_bus_bandwidth_ceiling_across_nodes() {
        // 64 GPUs on 8 nodes, 8 per node: the ring runs at NVLink's 369 GB/s. Uncapped, LL
        // (6.6 + 56·1.0 + 7·2.7 = 81.5 us at half the rate) would win an 8 MB reduce-scatter;
        // at its 20.4 GB/s ceiling it loses to LL128 (148.4 us at 0.92 of the rate).
        let traffic = 8e6 * 63.0 / 64.0;
        let rate = 369e9;
        let ll_uncapped = 81.5e-6 + traffic / (0.5 * rate);
        let ll128 = 148.4e-6 + traffic / (0.92 * rate);
        assert!(ll_uncapped < ll128);
        assert!((nccl().seconds(64, 8, traffic, rate) - ll_uncapped).abs() < 1e-12);
        let t = nccl_with_ll_ceiling().seconds(64, 8, traffic, rate);
        assert!((t - ll128).abs() < 1e-12, "{t} vs {ll128}");
        // 46 GB/s of bus bandwidth: latency, not the links, sets it.
        let bus = traffic / t / 1e9;
        assert!((45.0..47.0).contains(&bus), "{bus}");
        // On two nodes the ceiling is 39 GB/s: a 16 KB call (latency-bound) still takes LL.
        let small = 16e3 * 15.0 / 16.0;
        let two = nccl_with_ll_ceiling().seconds(16, 2, small, rate);
        let ll_two = (6.6 + 14.0 * 1.0 + 2.7) * 1e-6 + small / 39e9;
        assert!((two - ll_two).abs() < 1e-12, "{two} vs {ll_two}");
        // A ceiling that is not positive is reported.
        let mut bad = nccl_with_ll_ceiling();
        bad.ring[0].max_bus_gb_per_s = Some(NodeScaleCeiling {
            two_nodes: 0.0,
            more_nodes: 20.4,
        });
        assert_eq!(bad.problems().len(), 1, "{:?}", bad.problems());
        // ... and skipped: on two nodes the call runs as if uncapped.
        let uncapped = nccl().seconds(16, 2, small, rate);
        assert!((bad.seconds(16, 2, small, rate) - uncapped).abs() < 1e-15);
        assert!(uncapped < two);
    }

    #[test]
    fn a_large_message_runs_near_the_bandwidth_with_simple() {
        let traffic = 1e9;
        let t = nccl().seconds(64, 8, traffic, 50e9);
        let simple = 296.8e-6 + traffic / 50e9;
        assert!((t - simple).abs() < 1e-12);
        assert!(t / (traffic / 50e9) < 1.02);
    }

    #[test]
    fn full_node_rings_lose_rate_as_the_ring_grows() {
        // Full-node reduce-scatters of 8 GB at NVLink's 369 GB/s (8 GPUs per node, 8 NICs).
        let rate = 369e9;
        // 4 nodes, 32 GPUs: Simple, 8.4 + 28·3.4 + 3·14 = 145.6 us.
        let traffic_4 = 8e9 * 31.0 / 32.0;
        let t4 = nccl().seconds(32, 4, traffic_4, rate);
        assert!((t4 - (145.6e-6 + traffic_4 / rate)).abs() < 1e-12, "{t4}");
        // 128 nodes, 1024 GPUs: LL128, 14 + 896·1.9 + 127·4.0 = 2224.4 us at 0.92 of the
        // rate, beats Simple's 8.4 + 896·3.4 + 127·14 = 4832.8 us.
        let traffic_128 = 8e9 * 1023.0 / 1024.0;
        let t128 = nccl().seconds(1024, 128, traffic_128, rate);
        let ll128 = 2224.4e-6 + traffic_128 / (0.92 * rate);
        assert!(ll128 < 4832.8e-6 + traffic_128 / rate);
        assert!((t128 - ll128).abs() < 1e-9, "{t128} vs {ll128}");
        // Bus bandwidth 366 → 310 GB/s: NCCL's own model loses 15% from 4 to 128 nodes at
        // this size; measured H100 rings lose 28% (360 → 260 GB/s, NVIDIA/nccl#1229, message
        // size not stated), so about half the measured fall is latency.
        let (bus_4, bus_128) = (traffic_4 / t4 / 1e9, traffic_128 / t128 / 1e9);
        assert!((366.0..367.0).contains(&bus_4), "{bus_4}");
        assert!((310.0..311.0).contains(&bus_128), "{bus_128}");
    }

    #[test]
    fn one_gpu_per_node_takes_pat_when_it_is_faster() {
        // 32 GPUs on 32 nodes: ring Simple 8.4 + 31·14 = 442.4 us; PAT 8 + 5·4 + 32·2.8 =
        // 117.6 us at 0.75 of the bandwidth.
        let traffic = 4e6;
        let t = nccl().seconds(32, 32, traffic, 50e9);
        let pat = 117.6e-6 + traffic / (0.75 * 50e9);
        let ll128 = (14.0 + 31.0 * 8.5) * 1e-6 + traffic / (0.92 * 50e9);
        assert!(pat < ll128);
        assert!((t - pat).abs() < 1e-12, "{t} vs {pat}");
    }

    #[test]
    fn degenerate_inputs_cost_nothing_or_the_plain_time() {
        let m = nccl();
        assert_eq!(m.seconds(64, 8, 0.0, 50e9), 0.0);
        assert_eq!(m.seconds(64, 8, 1e6, 0.0), 0.0);
        assert_eq!(m.seconds(1, 1, 1e6, 50e9), 1e6 / 50e9);
        let empty = NcclLatencyModel {
            ring: vec![],
            ..nccl()
        };
        // No ring protocol and several GPUs per node: the plain bandwidth time.
        assert_eq!(empty.seconds(16, 2, 1e6, 50e9), 1e6 / 50e9);
        assert_eq!(empty.problems().len(), 1);
    }

    #[test]
    fn malformed_values_are_reported_and_skipped() {
        let mut m = nccl();
        m.ring[0].bandwidth_fraction = 0.0;
        m.ring[1].network_step_us = f64::NAN;
        m.pat.bandwidth_fraction = 1.5;
        assert_eq!(m.problems().len(), 3, "{:?}", m.problems());
        // The broken protocols are skipped: Simple prices the call.
        let traffic = 8e6 * 63.0 / 64.0;
        let t = m.seconds(64, 8, traffic, 50e9);
        assert!((t - (296.8e-6 + traffic / 50e9)).abs() < 1e-12);
    }
}
