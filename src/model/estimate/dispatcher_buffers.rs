//! Bytes of the communication buffers DeepEP and HybridEP allocate once per GPU, outside
//! PyTorch's allocator, sized as the libraries size them (`cards/cost-model.yaml`,
//! `dispatcher_buffers`, with the source of every constant).

use super::super::activations::{BF16, FP32};
use super::super::constants::{DeepepBufferSizing, HybridepBufferSizing};

const INT_BYTES: f64 = 4.0;
const INT64_BYTES: f64 = 8.0;
/// The `int4` control word DeepEP's RDMA buffer keeps per token.
const INT4_BYTES: f64 = 16.0;

/// What sizes a dispatcher's buffers: the EP group and one rank's share of the MoE layer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DispatcherGroup {
    /// Ranks in the expert group (EP × ETP).
    pub ranks: u32,
    /// Ranks of the group that share one NVLink domain.
    pub ranks_per_domain: u32,
    pub hidden: f64,
    /// Tokens one rank feeds the dispatcher per call.
    pub tokens_per_rank: f64,
    pub num_experts: f64,
    /// SMs the dispatcher's kernels run on (DeepEP: two per channel).
    pub comm_sms: f64,
}

/// DeepEP normal mode: the NVLink buffer (cudaMalloc), the RDMA buffer in NVSHMEM's
/// symmetric heap when the group spans more than one node of `nvl_peers` GPUs, and the
/// workspace. Megatron passes hidden × 2 bytes whatever the dispatch precision.
pub fn deepep_buffer_bytes(s: &DeepepBufferSizing, g: &DispatcherGroup) -> f64 {
    // The smallest entry that holds the group, else the largest (the card's order is free).
    let Some(config) = s
        .configs
        .iter()
        .filter(|c| c.ep >= g.ranks)
        .min_by_key(|c| c.ep)
        .or_else(|| s.configs.iter().max_by_key(|c| c.ep))
    else {
        return s.workspace_bytes;
    };
    let channels = (g.comm_sms / 2.0).floor().max(1.0);
    let peers = s.nvl_peers.max(1);
    let nvl_ranks = g.ranks.min(peers) as f64;
    let rdma_ranks = (g.ranks / peers).max(1) as f64;
    let hidden_bytes = g.hidden * BF16;
    let routing = s.max_topk * (INT64_BYTES + FP32) + s.max_scales * FP32;
    let nvl = channels
        * nvl_ranks
        * ((2.0 * rdma_ranks + 3.0) * INT_BYTES
            + config.nvl_recv_tokens * (hidden_bytes + s.source_meta_bytes + routing));
    let rdma = if g.ranks > peers {
        let bytes = channels
            * rdma_ranks
            * ((2.0 * peers as f64 + 2.0) * 2.0 * INT_BYTES
                + config.rdma_recv_tokens
                    * 2.0
                    * (hidden_bytes + s.source_meta_bytes + routing + INT4_BYTES))
            + s.rdma_margin_bytes;
        let chunk = s.nvshmem_granularity_bytes.max(1.0);
        (bytes / chunk).ceil() * chunk
    } else {
        0.0
    };
    nvl + rdma + s.workspace_bytes
}

/// HybridEP: NVLink buffers for every token of the group landing on one rank (dispatch and
/// combine share them), plus, across NVLink domains, staging for the local tokens and three
/// token-sized buffers per remote domain.
pub fn hybridep_buffer_bytes(s: &HybridepBufferSizing, g: &DispatcherGroup) -> f64 {
    let per_domain = g.ranks_per_domain.clamp(1, g.ranks.max(1)) as f64;
    let domains = (g.ranks.max(1) as f64 / per_domain).ceil();
    let experts_per_domain = g.num_experts / g.ranks.max(1) as f64 * per_domain;
    let scales = (g.hidden / s.scale_block.max(1.0)).floor() * FP32;
    let token = g.hidden * BF16;
    let worst_case_tokens = g.tokens_per_rank * g.ranks as f64;
    let nvlink = worst_case_tokens * (token + experts_per_domain * FP32 + scales);
    let remote = domains - 1.0;
    let network = if remote > 0.0 {
        g.tokens_per_rank
            * ((token + g.num_experts * FP32 + scales)
                + remote * (3.0 * token + 3.0 * experts_per_domain * FP32 + scales))
    } else {
        0.0
    };
    nvlink + network
}

#[cfg(test)]
mod tests {
    use super::super::super::constants::DeepepConfigEntry;
    use super::*;

    fn deepep() -> DeepepBufferSizing {
        DeepepBufferSizing {
            configs: vec![
                DeepepConfigEntry {
                    ep: 8,
                    nvl_recv_tokens: 256.0,
                    rdma_recv_tokens: 132.0,
                },
                DeepepConfigEntry {
                    ep: 64,
                    nvl_recv_tokens: 288.0,
                    rdma_recv_tokens: 140.0,
                },
            ],
            nvl_peers: 8,
            max_topk: 128.0,
            max_scales: 128.0,
            source_meta_bytes: 8.0,
            rdma_margin_bytes: 1048576.0,
            workspace_bytes: 33554432.0,
            nvshmem_granularity_bytes: 536870912.0,
        }
    }

    fn group(ranks: u32, hidden: f64) -> DispatcherGroup {
        DispatcherGroup {
            ranks,
            ranks_per_domain: 8,
            hidden,
            tokens_per_rank: 4096.0,
            num_experts: 256.0,
            comm_sms: 20.0,
        }
    }

    #[test]
    fn deepep_intranode_by_hand() {
        // EP8, hidden 2048, 20 SMs: 10 channels × 8 ranks × (5 ints + 256 tokens × (4096 +
        // 8 + 128·12 + 128·4)) = 10 · 8 · (20 + 256 · 6152) = 125,994,560 bytes, plus the
        // 32 MiB workspace; no RDMA buffer inside one node.
        let bytes = deepep_buffer_bytes(&deepep(), &group(8, 2048.0));
        assert_eq!(bytes, 125_994_560.0 + 33_554_432.0);
    }

    #[test]
    fn deepep_internode_by_hand() {
        // EP64 over 8 nodes, hidden 7168: NVLink 10 · 8 · ((2·8 + 3)·4 + 288 · (14336 + 8 +
        // 2048)) = 10 · 8 · (76 + 4,720,896) = 377,677,760; RDMA 10 · 8 · (18·2·4 + 140 · 2
        // · (14336 + 8 + 2048 + 16)) + 1 MiB = 10 · 8 · (144 + 4,594,240) + 1,048,576 =
        // 368,599,296, one 512 MiB heap chunk; plus the workspace.
        let bytes = deepep_buffer_bytes(&deepep(), &group(64, 7168.0));
        assert_eq!(bytes, 377_677_760.0 + 536_870_912.0 + 33_554_432.0);
    }

    #[test]
    fn deepep_channels_follow_the_configured_sms() {
        let s = deepep();
        let twenty = deepep_buffer_bytes(&s, &group(8, 2048.0));
        let forty = deepep_buffer_bytes(
            &s,
            &DispatcherGroup {
                comm_sms: 40.0,
                ..group(8, 2048.0)
            },
        );
        assert_eq!(
            forty - s.workspace_bytes,
            2.0 * (twenty - s.workspace_bytes)
        );
        // An EP size between table entries takes the next larger one (16 -> the EP64 row);
        // beyond the table, the last row.
        let sixteen = deepep_buffer_bytes(&s, &group(16, 2048.0));
        let two_fifty_six = deepep_buffer_bytes(&s, &group(256, 2048.0));
        assert!(sixteen > twenty && two_fifty_six > sixteen);
        // The card's row order does not matter.
        let mut reversed = s.clone();
        reversed.configs.reverse();
        assert_eq!(deepep_buffer_bytes(&reversed, &group(16, 2048.0)), sixteen);
        assert_eq!(deepep_buffer_bytes(&reversed, &group(8, 2048.0)), twenty);
    }

    #[test]
    fn hybridep_by_hand() {
        let s = HybridepBufferSizing { scale_block: 128.0 };
        // EP8 in one domain, 4096 tokens, hidden 2048, 256 experts (32 per rank, 256 per
        // domain): 32768 worst-case tokens × (4096 + 256·4 + 16·4) = 32768 · 5184.
        let one = hybridep_buffer_bytes(&s, &group(8, 2048.0));
        assert_eq!(one, 32768.0 * 5184.0);
        // EP16 over two 8-GPU domains: 65536 tokens × (4096 + 128·4 + 64) on NVLink, plus
        // 4096 × ((4096 + 256·4 + 64) + 1 · (3·4096 + 3·128·4 + 64)) = 4096 · (5184 + 13888).
        let two = hybridep_buffer_bytes(&s, &group(16, 2048.0));
        assert_eq!(two, 65536.0 * 4672.0 + 4096.0 * (5184.0 + 13888.0));
    }
}
