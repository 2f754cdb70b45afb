//! Fine-grained activation offloading's reloads against the backward that hides them.
//!
//! Megatron-Core (`pipeline_parallel/fine_grained_activation_offload.py`, d98e8a64) brings one
//! group back ahead of need: when the backward leaves a group (the backward of its start
//! marker, `on_group_start_backward`), the next group to be needed starts coming back on
//! `h2d_stream`, behind the compute so far, and the backward waits for it on reaching that
//! group's output (`on_group_commit_backward`). A group's reload is hidden only by the backward
//! of what lies between it and the next offloaded group in forward order, not by either
//! group's own backward: neighbouring groups (`core_attn`'s output is `attn_proj`'s input) hide
//! nothing. The offloads run the other way over the link, beside another microbatch's reloads,
//! and hold up nothing: the same bytes each way fit in a layer the reloads already stretch to
//! their length.

use crate::model::activations::{OffloadGroups, OFFLOAD_GROUP_ORDER};

/// The stretches of one layer's backward in forward order: each offloading group's own module
/// by name, or (`None`) what lies between groups: after `qkv_linear`, MLA's up-projections;
/// after `mlp_norm`, the router and dispatch; after `moe_act`, fc2, the combine and the shared
/// experts (or a dense layer's MLP).
pub(super) const LAYER_STRETCHES: [Option<&str>; STRETCHES] = [
    Some("attn_norm"),
    Some("qkv_linear"),
    None,
    Some("core_attn"),
    Some("attn_proj"),
    Some("mlp_norm"),
    None,
    Some("expert_fc1"),
    Some("moe_act"),
    None,
];
pub(super) const STRETCHES: usize = 10;

/// One stretch of a layer's backward.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Stretch {
    /// The offloading group whose module this is (its index in `OFFLOAD_GROUP_ORDER`).
    pub group: Option<usize>,
    pub backward_s: f64,
}

/// `LAYER_STRETCHES` with each stretch's backward seconds, in the same order.
pub(super) fn layer_stretches(backward_s: [f64; STRETCHES]) -> [Stretch; STRETCHES] {
    let mut stretches = [Stretch::default(); STRETCHES];
    for ((stretch, name), seconds) in stretches.iter_mut().zip(LAYER_STRETCHES).zip(backward_s) {
        stretch.group = name.and_then(|n| OFFLOAD_GROUP_ORDER.iter().position(|g| *g == n));
        stretch.backward_s = seconds;
    }
    stretches
}

/// Seconds one layer's backward waits on reloads: each offloaded group's reload less the
/// backward between it and the next offloaded group (the layer after is taken to be like this
/// one, so the last group's cover runs round to the first).
pub(super) fn reload_stall_s(stretches: &[Stretch; STRETCHES], reload_s: &OffloadGroups) -> f64 {
    let offloaded = |s: &Stretch| s.group.is_some_and(|g| reload_s[g] > 0.0);
    let mut stall = 0.0;
    for (at, stretch) in stretches.iter().enumerate() {
        let Some(group) = stretch.group.filter(|&g| reload_s[g] > 0.0) else {
            continue;
        };
        let mut cover = 0.0;
        for step in 1..STRETCHES {
            let next = &stretches[(at + step) % STRETCHES];
            if offloaded(next) {
                break;
            }
            cover += next.backward_s;
        }
        stall += (reload_s[group] - cover).max(0.0);
    }
    stall
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(backward: [(Option<usize>, f64); STRETCHES]) -> [Stretch; STRETCHES] {
        backward.map(|(group, backward_s)| Stretch { group, backward_s })
    }

    #[test]
    fn every_offloading_group_has_one_stretch_in_forward_order() {
        let stretches = layer_stretches([0.0; STRETCHES]);
        let groups: Vec<usize> = stretches.iter().filter_map(|s| s.group).collect();
        assert_eq!(groups, (0..OFFLOAD_GROUP_ORDER.len()).collect::<Vec<_>>());
        let named = LAYER_STRETCHES.iter().filter(|n| n.is_some()).count();
        assert_eq!(named, OFFLOAD_GROUP_ORDER.len());
    }

    #[test]
    fn a_reload_is_hidden_only_by_the_backward_before_the_next_offloaded_group() {
        // Groups 0 and 1 back to back with 3 s between group 1 and the layer's end and 2 s
        // before group 0 (the next layer's, round the end).
        let stretches = layer([
            (None, 2.0),
            (Some(0), 10.0),
            (Some(1), 10.0),
            (None, 3.0),
            (None, 0.0),
            (None, 0.0),
            (None, 0.0),
            (None, 0.0),
            (None, 0.0),
            (None, 0.0),
        ]);
        let mut reload = [0.0; 7];
        reload[0] = 4.0;
        reload[1] = 4.0;
        // Group 0's reload starts when group 1's backward ends and is needed at once: all 4 s
        // wait. Group 1's is covered by the 3 s after it and the 2 s before group 0.
        assert_eq!(reload_stall_s(&stretches, &reload), 4.0);
        // Group 1 alone: everything but its own backward covers it.
        reload[0] = 0.0;
        reload[1] = 30.0;
        assert_eq!(reload_stall_s(&stretches, &reload), 30.0 - 15.0);
        // Nothing offloaded, nothing waits.
        assert_eq!(reload_stall_s(&stretches, &[0.0; 7]), 0.0);
    }
}
