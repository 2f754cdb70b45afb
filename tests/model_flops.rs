//! FLOPs per token against published / hand-derived values (skills-format §3g,
//! cost-model §1.3).

mod model_support;

use model_support::arch;
use moe_skills::model::flops::model_flops_per_token;

fn gflop(id: &str, mtp: Option<u32>, seq: u64) -> f64 {
    let a = arch(id);
    let m = mtp.unwrap_or(a.mtp_num_layers);
    model_flops_per_token(&a, m, seq).total() / 1e9
}

fn close(actual: f64, expected: f64, rel: f64) {
    assert!(
        ((actual - expected) / expected).abs() <= rel,
        "got {actual:.3}, expected {expected:.3} (±{:.2}%)",
        rel * 100.0
    );
}

const SEQS: [u64; 7] = [4096, 8192, 16384, 32768, 65536, 131072, 262144];

#[test]
fn deepseek_v3_with_mtp_all_seven_lengths() {
    let expected = [260.0, 291.2, 353.6, 478.4, 728.1, 1227.4, 2225.9];
    for (s, e) in SEQS.iter().zip(expected) {
        // Published to one decimal: 0.05 GFLOP absolute.
        let got = gflop("deepseek-v3", None, *s);
        assert!(
            (got - e).abs() < 0.06,
            "seq {s}: got {got:.2}, expected {e}"
        );
    }
}

#[test]
fn deepseek_v3_without_mtp() {
    close(gflop("deepseek-v3", Some(0), 4096), 249.8, 0.001);
}

#[test]
fn qwen3_30b_table() {
    let expected = [23.01, 27.84, 37.50, 56.83, 95.48, 172.79, 327.41];
    for (s, e) in SEQS.iter().zip(expected) {
        close(gflop("qwen3-30b-a3b", None, *s), e, 0.001);
    }
}

#[test]
fn qwen3_235b_table() {
    let expected = [148.0, 167.0, 204.8, 280.5, 431.9, 734.7, 1340.3];
    for (s, e) in SEQS.iter().zip(expected) {
        close(gflop("qwen3-235b-a22b", None, *s), e, 0.001);
    }
}

#[test]
fn qwen3_next_table_with_and_without_mtp() {
    let with = [25.13, 26.44, 29.05, 34.29, 44.76, 65.70, 107.57];
    let without = [22.74, 23.95, 26.36, 31.20, 40.86, 60.19, 98.84];
    for ((s, w), wo) in SEQS.iter().zip(with).zip(without) {
        close(gflop("qwen3-next-80b-a3b", Some(1), *s), w, 0.001);
        close(gflop("qwen3-next-80b-a3b", Some(0), *s), wo, 0.001);
    }
}

#[test]
fn qwen35_397b_table() {
    let expected = [115.0, 118.0, 124.0, 136.1, 160.3, 208.6, 305.2];
    for (s, e) in SEQS.iter().zip(expected) {
        close(gflop("qwen3.5-397b-a17b", Some(0), *s), e, 0.001);
    }
}

#[test]
fn kimi_mixtral_gpt_oss_at_4k() {
    close(gflop("kimi-k2", None, 4096), 204.5, 0.001);
    close(gflop("mixtral-8x22b", None, 4096), 242.2, 0.001);
    // GPT-OSS with its alternating 128-token sliding window matches the published 32.6.
    close(gflop("gpt-oss-120b", None, 4096), 32.6, 0.005);
}

#[test]
fn gpt_oss_all_full_attention_is_34_3() {
    let mut a = arch("gpt-oss-120b");
    a.attention_pattern.clear();
    close(
        model_flops_per_token(&a, 0, 4096).total() / 1e9,
        34.3,
        0.002,
    );
}

#[test]
fn dense_llama_matches_closed_form() {
    // Llama3-70B: 6·[L·(attn proj + 3hf) + hV] + 6·L·s·n_a·d (causal).
    let a = arch("llama3-70b");
    let (l, h, f, v, s) = (80.0, 8192.0, 28672.0, 128256.0, 4096.0);
    let attn_proj = h * (8192.0 + 2.0 * 8.0 * 128.0) + 8192.0 * h;
    let expected = 6.0 * (l * (attn_proj + 3.0 * h * f) + h * v) + 6.0 * l * s * 8192.0;
    close(model_flops_per_token(&a, 0, 4096).total(), expected, 1e-9);
}
