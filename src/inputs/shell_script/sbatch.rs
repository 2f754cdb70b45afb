//! The GPU count an sbatch file asks Slurm for, from its `#SBATCH` directives: nodes × tasks
//! (or GPUs) per node. Under `srun` every task is one training rank, so that count is the
//! world size when the script does not start `torchrun` itself.

/// `nodes × per-node` from `#SBATCH --nodes=N` (`-N N`) and `--ntasks-per-node=M`
/// (else `--gpus-per-node=M`, else `--gres=gpu:M`), with the directive text; `None` unless
/// both are integers.
pub(super) fn sbatch_gpus(script: &str) -> Option<(u64, String)> {
    let mut nodes: Option<u64> = None;
    let mut tasks: Option<u64> = None;
    let mut gpus: Option<u64> = None;
    let mut shown: Vec<String> = Vec::new();
    for line in script.lines() {
        let Some(directive) = line.trim().strip_prefix("#SBATCH") else {
            continue;
        };
        let words: Vec<&str> = directive.split_whitespace().collect();
        for (at, word) in words.iter().enumerate() {
            let (key, value) = match word.split_once('=') {
                Some((key, value)) => (key, Some(value)),
                None => (*word, words.get(at + 1).copied()),
            };
            let number = || value.and_then(|v| v.trim().parse::<u64>().ok());
            let slot = match key {
                "--nodes" | "-N" => &mut nodes,
                "--ntasks-per-node" => &mut tasks,
                "--gpus-per-node" => &mut gpus,
                "--gres" => {
                    let count = value
                        .and_then(|v| v.rsplit(':').next())
                        .and_then(|v| v.parse::<u64>().ok());
                    if value.is_some_and(|v| v.starts_with("gpu")) && count.is_some() {
                        gpus = gpus.or(count);
                        shown.push(format!("{key}={}", value.unwrap_or_default()));
                    }
                    continue;
                }
                _ => continue,
            };
            if let Some(n) = number() {
                *slot = Some(n);
                shown.push(format!("{key}={n}"));
            }
        }
    }
    let per_node = tasks.or(gpus)?;
    let total = nodes?.checked_mul(per_node)?;
    (total > 0).then(|| (total, shown.join(" ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_times_tasks_per_node() {
        let script =
            "#!/bin/bash\n#SBATCH --nodes=4\n#SBATCH --ntasks-per-node=8\n#SBATCH -t 4:00:00\n";
        assert_eq!(
            sbatch_gpus(script),
            Some((32, "--nodes=4 --ntasks-per-node=8".to_string()))
        );
        assert_eq!(
            sbatch_gpus("#SBATCH -N 2 --gres=gpu:8\n").map(|g| g.0),
            Some(16)
        );
        // Placeholders (Megatron-LM's examples ship `your_own_num_nodes`) give no count.
        assert_eq!(
            sbatch_gpus("#SBATCH --nodes=your_own_num_nodes\n#SBATCH --ntasks-per-node=8\n"),
            None
        );
        assert_eq!(sbatch_gpus("# SBATCH --nodes=4\n"), None);
    }
}
