//! Where a token's routed experts land: how many distinct nodes (NVLink domains) of its expert
//! group one token reaches, which sets what a deduplicating dispatcher (DeepEP, HybridEP)
//! sends across the network, one copy per token per remote node.
//!
//! Experts sit on the expert-parallel ranks in expert order, and the ranks fill the nodes in
//! rank order (Megatron-Core's expert rank generator puts EP next to ETP, fastest after it), so
//! a routing group of experts is a run of consecutive ranks. Routing is taken as uniform over
//! the experts a token may reach, which is what the benchmarks' forced load balancing does
//! (`moe_router_force_load_balancing`: random logits, Megatron-Core `router.py`).

use super::arch::RouterGroups;

/// Expected distinct nodes, of `nodes`, that hold at least one of a token's `top_k` experts.
///
/// Without groups the experts are uniform over the nodes. With groups (Megatron-Core's
/// `group_limited_topk`) a token first picks `group_topk` of `num_groups` groups, by the sum of
/// each group's best `top_k / group_topk` scores, so every picked group takes some of its
/// experts; then:
/// - several whole groups per node (`num_groups` a multiple of `nodes`): a node is reached
///   when any of its groups is picked (hypergeometric);
/// - whole nodes per group (`nodes` a multiple of `num_groups`): a picked group's share of
///   the experts, `top_k / group_topk`, spreads uniformly over its nodes.
///
/// A split that fits neither (groups straddling nodes) is priced as ungrouped. Grouped routing
/// can reach more nodes than uniform routing when `top_k` is small: each picked group takes at
/// least one expert, so no two of them collide on a node holding one group.
pub fn nodes_reached(top_k: f64, nodes: f64, groups: Option<RouterGroups>) -> f64 {
    if nodes <= 1.0 {
        return nodes.max(0.0);
    }
    let ungrouped = nodes * (1.0 - (1.0 - 1.0 / nodes).powf(top_k));
    let Some(g) = groups else { return ungrouped };
    let num_groups = g.num_groups as f64;
    // Groups that receive experts: at most one per expert.
    let picked = (g.group_topk as f64).min(top_k);
    // Groups map onto whole nodes only (the caller passes no groups for a part-filled last
    // node); a count that is not whole has no split to follow.
    if picked <= 0.0 || picked >= num_groups || nodes.fract() != 0.0 {
        return ungrouped;
    }
    let whole_nodes = nodes as u64;
    if g.num_groups.is_multiple_of(whole_nodes) {
        let per_node = num_groups / nodes;
        // Chance that none of the node's groups is among the picked ones.
        let missed = ratio_of_binomials(num_groups - per_node, num_groups, picked);
        nodes * (1.0 - missed)
    } else if whole_nodes.is_multiple_of(g.num_groups) {
        let nodes_per_group = nodes / num_groups;
        let experts_per_group = top_k / picked;
        picked * nodes_per_group * (1.0 - (1.0 - 1.0 / nodes_per_group).powf(experts_per_group))
    } else {
        ungrouped
    }
}

/// C(a, k) / C(b, k) for a ≤ b: the chance that `k` picks without replacement out of `b` all
/// fall among a given `a`.
fn ratio_of_binomials(a: f64, b: f64, k: f64) -> f64 {
    let mut ratio = 1.0;
    let mut i = 0.0;
    while i < k {
        if a - i <= 0.0 {
            return 0.0;
        }
        ratio *= (a - i) / (b - i);
        i += 1.0;
    }
    ratio
}

#[cfg(test)]
mod tests {
    use super::*;

    const DSV3: RouterGroups = RouterGroups {
        num_groups: 8,
        group_topk: 4,
    };

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn ungrouped_routing_spreads_top_k_uniformly_over_the_nodes() {
        // 8 nodes, top-8: 8 · (1 − (7/8)^8) = 5.2505...
        assert!(close(
            nodes_reached(8.0, 8.0, None),
            8.0 * (1.0 - (7.0_f64 / 8.0).powi(8))
        ));
        assert!(close(nodes_reached(8.0, 1.0, None), 1.0));
    }

    #[test]
    fn one_group_per_node_reaches_exactly_the_picked_groups_nodes() {
        // DeepSeek-V3 on EP64 across 8 nodes: each token reaches its 4 groups' 4 nodes (the
        // paper's node-limited routing, M = 4), not the 5.25 of uniform routing.
        assert!(close(nodes_reached(8.0, 8.0, Some(DSV3)), 4.0));
    }

    #[test]
    fn two_groups_per_node_follow_the_hypergeometric_count() {
        // EP32 across 4 nodes: a node is missed when neither of its 2 groups is among the 4
        // picked: C(6,4)/C(8,4) = 15/70. Reached: 4 · 55/70.
        assert!(close(
            nodes_reached(8.0, 4.0, Some(DSV3)),
            4.0 * 55.0 / 70.0
        ));
    }

    #[test]
    fn a_group_over_two_nodes_spreads_its_share_of_the_experts() {
        // EP128 across 16 nodes: each picked group's 2 experts over its 2 nodes:
        // 4 · 2 · (1 − (1/2)^2) = 6.
        assert!(close(nodes_reached(8.0, 16.0, Some(DSV3)), 6.0));
    }

    #[test]
    fn one_expert_per_picked_group_never_collides() {
        // top-4 from 4 of 8 groups, one group per node: each picked group's best expert, on
        // 4 distinct nodes; uniform routing would collide (8 · (1 − (7/8)^4) = 3.31).
        let groups = Some(RouterGroups {
            num_groups: 8,
            group_topk: 4,
        });
        assert!(close(nodes_reached(4.0, 8.0, groups), 4.0));
    }

    #[test]
    fn groups_that_straddle_nodes_are_priced_as_ungrouped() {
        let ungrouped = nodes_reached(8.0, 3.0, None);
        assert!(close(nodes_reached(8.0, 3.0, Some(DSV3)), ungrouped));
    }

    #[test]
    fn reached_nodes_stay_within_the_nodes_the_experts_and_the_groups_allow() {
        for nodes in [2.0, 4.0, 8.0, 16.0, 32.0] {
            for (num_groups, group_topk) in [(2, 1), (4, 2), (8, 4), (8, 3), (16, 4), (32, 8)] {
                for top_k in [1.0, 2.0, 4.0, 6.0, 8.0] {
                    let groups = Some(RouterGroups {
                        num_groups,
                        group_topk,
                    });
                    let grouped = nodes_reached(top_k, nodes, groups);
                    assert!(grouped > 0.0 && grouped <= nodes.min(top_k) + 1e-12);
                    // At most the picked groups' nodes.
                    let per_group = (nodes / num_groups as f64).max(1.0);
                    assert!(grouped <= group_topk as f64 * per_group + 1e-12);
                }
            }
        }
    }
}
