//! Whole launch scripts as people keep them: flags in variables and arrays, chosen in `if`
//! blocks, run at the end (or inside `bash -c` under `srun` in an sbatch file).

use moe_skills::inputs::read_launch_script;
use moe_skills::model::Precision;
use proptest::prelude::*;

/// Shaped like Megatron-LM's `examples/*/train_*.sh`: positional defaults, arithmetic,
/// per-concern arrays with comments inside, an FP8 block chosen by a variable, a mock-data
/// block chosen by a string test, a file test guarding an exit, and `${ARRAY[@]}` expansions.
const EXAMPLE_SCRIPT: &str = r#"#!/bin/bash
export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-1}
CHECKPOINT_PATH=${1:-"checkpoints/qwen3_30b"}
TOKENIZER_ARG=${2:-"MOCK"}
mkdir -p "$(dirname "$CHECKPOINT_PATH")"

GPUS_PER_NODE=8
NUM_NODES=${NUM_NODES:-2}
WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))
PRETRAIN_SCRIPT_PATH="pretrain_gpt.py"
DTYPE="fp8"

DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NUM_NODES
)
MODEL_ARGS=(
    --num-layers 48 --hidden-size 2048 --num-attention-heads 32
    --group-query-attention --num-query-groups 4 --kv-channels 128
    --num-experts 128 --moe-router-topk 8 --moe-ffn-hidden-size 768
    --seq-length 8192   # long enough to need CP
    --vocab-size 151936 --swiglu --untie-embeddings-and-output-weights
)
TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 256
    --bf16
)
DTYPE_ARGS=()
if [[ "$DTYPE" == "fp8" ]]; then
    DTYPE_ARGS+=(
        "--fp8-format hybrid"
        "--fp8-recipe blockwise"
    )
fi
PARALLEL_ARGS=(
    --tensor-model-parallel-size 1
    --context-parallel-size 2
    --expert-model-parallel-size $(( WORLD_SIZE / 2 ))
    # --pipeline-model-parallel-size 2   (left out)
)
if [[ "$TOKENIZER_ARG" == "MOCK" ]]; then
    DATA_ARGS=(--mock-data --tokenizer-type NullTokenizer)
else
    DATA_ARGS=(--data-path /data --tokenizer-model "$TOKENIZER_ARG")
fi
if [ ! -f "$PRETRAIN_SCRIPT_PATH" ]; then
    echo "run from the Megatron-LM checkout"
    exit 1
fi
torchrun ${DISTRIBUTED_ARGS[@]} "$PRETRAIN_SCRIPT_PATH" \
    ${MODEL_ARGS[@]} ${TRAINING_ARGS[@]} ${DTYPE_ARGS[@]} \
    ${PARALLEL_ARGS[@]} ${DATA_ARGS[@]} \
    --save "$CHECKPOINT_PATH"
"#;

#[test]
fn an_example_style_script_reads_its_training_command() {
    let config = read_launch_script(EXAMPLE_SCRIPT).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.num_gpus, Some(16));
    assert_eq!(config.seq_length, Some(8192));
    assert_eq!(config.micro_batch_size, Some(1));
    assert_eq!(config.global_batch_size, Some(256));
    assert_eq!(config.cp(), 2);
    assert_eq!(config.ep(), 8);
    assert_eq!(config.pp(), 1);
    assert_eq!(config.precision(), Precision::Fp8Blockwise);
    let notes: Vec<&str> = config
        .ignored_settings
        .iter()
        .map(|s| s.key.as_str())
        .collect();
    // The environment the script exports and the defaults it fell back to are named.
    assert!(notes
        .iter()
        .any(|k| k.starts_with("export CUDA_DEVICE_MAX_CONNECTIONS")));
    let defaults = config
        .ignored_settings
        .iter()
        .find(|s| s.key == "environment defaults")
        .unwrap_or_else(|| panic!("no environment defaults note in {notes:?}"));
    assert!(
        defaults.reason.contains("NUM_NODES=2"),
        "{}",
        defaults.reason
    );
    // The mock-data branch was the one read.
    assert!(notes.contains(&"--mock-data"), "{notes:?}");
    assert!(!notes.contains(&"--data-path"), "{notes:?}");
}

#[test]
fn an_sbatch_file_running_the_trainer_through_bash_c_is_read() {
    let script = r#"#!/bin/bash
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=8
TP=${TP:-2}
EP=${EP:-8}
ARGS=(
    --tensor-model-parallel-size ${TP}
    --expert-model-parallel-size ${EP}
    --sequence-parallel
    --seq-length 4096 --micro-batch-size 1 --global-batch-size 512 --bf16
)
if [ "${PROFILE:-0}" = 1 ]; then
    ARGS=("${ARGS[@]}" --profile)
fi
CMD="
cd /workspace/megatron;
python /workspace/megatron/pretrain_gpt.py ${ARGS[@]}"
sbatch <<EOF
srun --mpi=pmix --container-image=img bash -x -c "${CMD}" 2>&1 | tee log.txt
EOF
"#;
    let config = read_launch_script(script).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.tp(), 2);
    assert_eq!(config.ep(), 8);
    // srun starts one rank per Slurm task: 4 nodes × 8 tasks.
    assert_eq!(config.num_gpus, Some(32));
    assert!(config
        .assumed_defaults
        .iter()
        .any(|d| d.key == "num_gpus" && d.why.contains("--ntasks-per-node=8")));
    assert_eq!(config.seq_length, Some(4096));
    assert_eq!(config.global_batch_size, Some(512));
    assert!(!config.ignored_settings.iter().any(|s| s.key == "--profile"));
}

#[test]
fn the_cli_checks_a_launch_script_file() {
    let json = run_cli(
        "launch",
        &[("train_qwen3_30b.sh", EXAMPLE_SCRIPT)],
        &[
            "check",
            "--json",
            "--hardware",
            "h100",
            "--config",
            "{train_qwen3_30b.sh}",
        ],
    );
    assert_eq!(json["layout"]["cp"], 2, "{json}");
    assert_eq!(json["layout"]["ep"], 8, "{json}");
}

/// Runs the binary with `files` written to a fresh folder; `{name}` in `args` is that file's
/// path. Returns the JSON it prints.
fn run_cli(tag: &str, files: &[(&str, &str)], args: &[&str]) -> serde_json::Value {
    let out = run_binary(tag, files, args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"))
}

/// As [`run_cli`], expecting an error; returns what the binary prints on stderr.
fn run_cli_error(tag: &str, files: &[(&str, &str)], args: &[&str]) -> String {
    let out = run_binary(tag, files, args);
    assert_eq!(out.status.code(), Some(2), "expected an error exit");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn run_binary(tag: &str, files: &[(&str, &str)], args: &[&str]) -> std::process::Output {
    let dir = std::env::temp_dir().join(format!("moe-skills-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap_or_else(|e| panic!("{e}"));
    }
    let args: Vec<String> = args
        .iter()
        .map(
            |arg| match arg.strip_prefix('{').and_then(|a| a.strip_suffix('}')) {
                Some(name) => dir.join(name).display().to_string(),
                None => arg.to_string(),
            },
        )
        .collect();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_moe-skills"))
        .args(&args)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let _ = std::fs::remove_dir_all(&dir);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A script that keeps the settings in variables, defaults, arithmetic and arrays reads
    /// exactly as the one-line command it runs.
    #[test]
    fn variables_and_arrays_read_as_the_command_they_build(
        tp in 1u32..8, cp in 1u32..8, mbs in 1u32..4, per_node in 1u32..9, nodes in 1u32..16,
        fp8 in any::<bool>(),
    ) {
        let precision = if fp8 { "--fp8-format hybrid --fp8-recipe blockwise" } else { "--bf16" };
        let line = format!(
            "torchrun --nproc_per_node {per_node} --nnodes {nodes} pretrain_gpt.py \
             --tensor-model-parallel-size {tp} --context-parallel-size {cp} \
             --micro-batch-size {mbs} --seq-length {} {precision}",
            4096 * cp
        );
        let script = format!(
            "NODES=${{NODES:-{nodes}}}\nCP={cp}\nSEQ=$((4096 * $CP))\n\
             DIST=(--nproc_per_node {per_node} --nnodes $NODES)\n\
             ARGS=(\n  --tensor-model-parallel-size {tp}  # TP\n  --context-parallel-size ${{CP}}\n)\n\
             ARGS+=(--micro-batch-size {mbs})\nP={}\n\
             if [[ \"$P\" == fp8 ]]; then\n  ARGS+=(\"--fp8-format hybrid\" \"--fp8-recipe blockwise\")\n\
             else\n  ARGS+=(--bf16)\nfi\n\
             torchrun ${{DIST[@]}} pretrain_gpt.py \"${{ARGS[@]}}\" --seq-length $SEQ\n",
            if fp8 { "fp8" } else { "bf16" }
        );
        // Quoted "${ARGS[@]}" keeps "--fp8-format hybrid" as one word, which Megatron-LM's
        // argparse would refuse; the plain script expands it unquoted instead.
        let script = if fp8 { script.replace("\"${ARGS[@]}\"", "${ARGS[@]}") } else { script };
        let from_script = read_launch_script(&script).map_err(|e| TestCaseError::fail(format!("{e}\n{script}")))?;
        let from_line = read_launch_script(&line).map_err(|e| TestCaseError::fail(format!("{e}\n{line}")))?;
        prop_assert_eq!(from_script.num_gpus, from_line.num_gpus);
        prop_assert_eq!(from_script.tp(), from_line.tp());
        prop_assert_eq!(from_script.cp(), from_line.cp());
        prop_assert_eq!(from_script.seq_length, from_line.seq_length);
        prop_assert_eq!(from_script.micro_batch_size, from_line.micro_batch_size);
        prop_assert_eq!(from_script.precision(), from_line.precision());
    }

    /// Any text made of shell's special characters reads or is refused, never panics.
    #[test]
    fn shell_text_never_panics(text in "[a-z$(){}\\[\\]\"' =#;|&<>\\\\\n@:+*/-]{0,200}") {
        let _ = read_launch_script(&text);
        let _ = read_launch_script(&format!("python pretrain_gpt.py {text}"));
    }
}

#[test]
fn a_diff_of_a_script_variable_is_triaged_as_the_flags_it_sets() {
    // The commit halves the nodes: the world size, and the EP size computed from it, follow.
    let after = EXAMPLE_SCRIPT.replace("NUM_NODES=${NUM_NODES:-2}", "NUM_NODES=${NUM_NODES:-1}");
    let diff = diffy::create_patch(EXAMPLE_SCRIPT, &after).to_string();
    let json = run_cli(
        "triage",
        &[("train.sh", EXAMPLE_SCRIPT), ("change.diff", &diff)],
        &[
            "triage-oom",
            "--json",
            "--hardware",
            "h100",
            "--before",
            "{train.sh}",
            "--diff",
            "{change.diff}",
        ],
    );
    let changed: Vec<&str> = json["causes"]
        .as_array()
        .unwrap_or_else(|| panic!("no causes in {json}"))
        .iter()
        .filter_map(|c| c["field"].as_str())
        .collect();
    assert!(changed.contains(&"num_gpus"), "{changed:?}");
    assert!(
        changed.contains(&"expert_model_parallel_size"),
        "{changed:?}"
    );
    assert!(json["rationale"]
        .as_str()
        .is_some_and(|r| r.contains("Read as whole files")));
}

#[test]
fn a_bridge_slurm_script_looping_over_configurations_reads_the_first() {
    // Shaped like Megatron-Bridge's examples/models/*/slurm_pretrain.sh.
    let script = r#"#!/bin/bash
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=8  # 4 on GB200
MODEL_NAME=qwen3_30b_a3b
RECIPE_NAME="${RECIPE_NAME:-${MODEL_NAME}_pretrain_config}"
SEQ_LENGTH=4096
PARALLELISM_CONFIGS=("1,2,8,1,False" "2,1,8,2,True")
SRUN_CMD="srun --mpi=pmix --container-image=$CONTAINER_IMAGE"
for CONFIG in "${PARALLELISM_CONFIGS[@]}"; do
    OLD_IFS=$IFS
    IFS=',' read -r TP PP EP CP SP <<< "$CONFIG"
    IFS=$OLD_IFS
    CLI_OVERRIDES=" \
        model.seq_length=$SEQ_LENGTH \
        model.tensor_model_parallel_size=$TP \
        model.pipeline_model_parallel_size=$PP \
        model.expert_model_parallel_size=$EP \
        model.sequence_parallel=$SP \
        model.context_parallel_size=$CP \
    "
    CMD="uv run --no-sync python /opt/Megatron-Bridge/scripts/training/run_recipe.py"
    CMD="$CMD --recipe ${RECIPE_NAME}"
    CMD="$CMD $CLI_OVERRIDES"
    $SRUN_CMD bash -c "$CMD"
done
"#;
    let config = read_launch_script(script).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.num_gpus, Some(32));
    assert_eq!(config.tp(), 1);
    assert_eq!(config.pp(), 2);
    assert_eq!(config.ep(), 8);
    assert_eq!(config.seq_length, Some(4096));
    assert_eq!(
        config.model,
        Some(moe_skills::model::ModelSpec::Id("qwen3_30b_a3b".into()))
    );
    assert!(config
        .ignored_settings
        .iter()
        .any(|s| s.key == "other training commands"));
}

/// Shaped like Megatron-Bridge's multi-config test scripts: the training command sits in a
/// function, runs inside `if ! …; then` and takes the function's arguments; a Python
/// here-document (dataset download) and a `Usage:` here-document around it are not shell.
const FUNCTION_SCRIPT: &str = r#"#!/bin/bash
set -euo pipefail
usage() {
    cat <<EOF
Usage: $0 [--single NAME]
  --recompute   turn recompute on
EOF
}
prepare_dataset() {
    uv run python - "$ROOT" <<'PY'
import sys
from huggingface_hub import snapshot_download
snapshot_download(repo_id=sys.argv[1], local_dir="--data-path")
PY
}
run_config() {
    local config="$1"
    local name tp ep
    IFS='|' read -r name tp ep <<< "$config"
    if ! torchrun --nproc_per_node 8 pretrain_gpt.py \
        --tensor-model-parallel-size "$tp" --expert-model-parallel-size "$ep" \
        --seq-length 4096 --micro-batch-size 1 --bf16; then
        echo "[FAIL] ${name}"
        return 1
    fi
}
CONFIGS=("tp2|2|4" "tp1|1|8")
prepare_dataset
for c in "${CONFIGS[@]}"; do
    if ! run_config "${c}"; then
        exit 1
    fi
done
"#;

#[test]
fn a_training_command_inside_a_called_function_is_read_with_its_arguments() {
    let config = read_launch_script(FUNCTION_SCRIPT).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.tp(), 2);
    assert_eq!(config.expert_model_parallel_size, Some(4));
    assert_eq!(config.seq_length, Some(4096));
    // The loop's second configuration is named, not silently dropped.
    assert!(
        config
            .ignored_settings
            .iter()
            .any(|s| s.key == "other training commands"),
        "{:?}",
        config.ignored_settings
    );
}

#[test]
fn a_script_that_runs_no_training_command_says_what_it_runs() {
    // Megatron-Bridge's examples/models/*/conversion.sh: a wrapper around another script.
    let conversion = "#!/usr/bin/env bash\nset -euo pipefail\n\
        WORKSPACE=${WORKSPACE:-/workspace}\n\
        ./scripts/conversion/convert.sh import \\\n    --hf-model org/model \\\n    \
        --megatron-path \"${WORKSPACE}/models/model\" \\\n    --trust-remote-code\n";
    let err = read_launch_script(conversion)
        .err()
        .unwrap_or_else(|| panic!("a conversion wrapper read as a training run"))
        .to_string();
    assert!(err.contains("runs no Python training command"), "{err}");
    assert!(err.contains("`./scripts/conversion/convert.sh`"), "{err}");
    // Megatron-LM's examples/inference/*.sh run a module, named with it.
    let inference = "torchrun --nproc-per-node 8 \\\n  \
        -m examples.inference.launch_inference_server \\\n  --tensor-model-parallel-size 2\n";
    let err = read_launch_script(inference)
        .err()
        .unwrap_or_else(|| panic!("an inference server read as a training run"))
        .to_string();
    assert!(
        err.contains("`torchrun -m examples.inference.launch_inference_server`"),
        "{err}"
    );
    // Megatron-LM's tools/wait_daemon.sh: functions for another script to call.
    let library = "is_daemon_running() {\n    pgrep -u $USER \"python\" > /dev/null\n}\n";
    let err = read_launch_script(library)
        .err()
        .unwrap_or_else(|| panic!("a function library read as a training run"))
        .to_string();
    assert!(
        err.contains("defines functions it never calls (`is_daemon_running`)"),
        "{err}"
    );
    // A bare argument list is still read as one.
    let flags = read_launch_script("--tensor-model-parallel-size 2 --seq-length 8192")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(flags.tp(), 2);
}

#[test]
fn a_bridge_recipe_with_a_variant_after_its_task_names_its_model() {
    // examples/training_features/long_context/qwen3_600m_sft_128k.sh (Megatron-Bridge).
    let script = "MODEL_NAME=qwen3_600m\n\
        uv run python -m torch.distributed.run --nproc_per_node=8 \
        scripts/training/run_recipe.py \\\n    \
        --recipe ${MODEL_NAME}_sft_128k_config \\\n    train.train_iters=100\n";
    let config = read_launch_script(script).unwrap_or_else(|e| panic!("{e}"));
    let model = serde_json::to_value(&config.model).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(model, serde_json::json!("qwen3_600m"));
}

#[test]
fn a_script_whose_command_is_in_another_file_says_which() {
    // Megatron-LM's examples/academic_paper_scripts/sc21/run_figure_*.sh: settings, then the
    // files that build and submit the command.
    let script = "TP=8\nMBS=1\n. `pwd`/CONFIG.sh\n. `pwd`/SBATCH.sh\nexit 0\n";
    let err = read_launch_script(script)
        .err()
        .unwrap_or_else(|| panic!("read a command from a script that sources it"))
        .to_string();
    assert!(err.contains("runs no training command itself"), "{err}");
    assert!(err.contains("`. `pwd`/CONFIG.sh`"), "{err}");
}

#[test]
fn a_missing_setting_names_the_variable_that_may_hold_it() {
    // Megatron-LM's sc21 SRUN.sh: the flags come from a variable another file sets.
    let json = run_cli_error(
        "unread",
        &[(
            "srun.sh",
            "CMD=\"python -u ${MEGATRON_CODE_DIR}/pretrain_gpt.py ${MEGATRON_PARAMS}\"\n\
             srun -l sh -c \"${CMD}\"\n",
        )],
        &["check", "--config", "{srun.sh}"],
    );
    assert!(json.contains("field `model`: missing"), "{json}");
    assert!(
        json.contains("`${MEGATRON_PARAMS}` (unexpanded shell variable"),
        "{json}"
    );
}

#[test]
fn a_file_of_flag_variables_or_setup_commands_is_refused_naming_them() {
    // Megatron-LM's examples/post_training/modelopt/conf/<org>/<model>.sh.
    let conf = "#!/bin/bash\nif [ -z ${HF_MODEL_CKPT} ]; then\n    HF_MODEL_CKPT=Qwen/Qwen3-30B-A3B\nfi\n\
                MODEL_ARGS=\" \\\n    --micro-batch-size 1 \\\n    --bf16 \\\n    --num-layers 48\"\n";
    let err = read_launch_script(conf)
        .err()
        .unwrap_or_else(|| panic!("read a variables file as a run"))
        .to_string();
    assert!(
        err.contains("its variables `MODEL_ARGS` hold flags"),
        "{err}"
    );
    // A setup script: builtins and utilities only.
    let setup = "#!/bin/bash\nset -euo pipefail\ngit clone https://example.org/x.git\nuv sync\n";
    let err = read_launch_script(setup)
        .err()
        .unwrap_or_else(|| panic!("read a setup script as a run"))
        .to_string();
    assert!(err.contains("(only `set`, `git`, `uv`)"), "{err}");
}

/// An sbatch file whose command runs at the end of an `&&` chain inside `bash -c` (as
/// Megatron-Bridge's slurm scripts run theirs), with flags picked by `&&` / `||` lists and
/// built by a `while` loop.
const LIST_AND_LOOP_SCRIPT: &str = r#"#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
PRECISION=${PRECISION:-fp8}
[ "$PRECISION" = fp8 ] && DTYPE="--fp8-format hybrid --fp8-recipe blockwise" || DTYPE="--bf16"
[ -d /lustre/cache ] && CACHE="--data-cache-path /lustre/cache"
LAYERS=()
i=0
while [ $i -lt 2 ]; do
    LAYERS+=(--num-layers-in-first-pipeline-stage 23)
    i=$((i+1))
done
SYNC="true"
CMD="python pretrain_gpt.py --num-layers 48 --hidden-size 2048 --num-attention-heads 32 \
  --group-query-attention --num-query-groups 4 --kv-channels 128 --num-experts 128 \
  --moe-router-topk 8 --moe-ffn-hidden-size 768 --vocab-size 151936 --swiglu \
  --seq-length 32768 --micro-batch-size 1 --global-batch-size 64 \
  --context-parallel-size 4 --expert-model-parallel-size 4 $DTYPE"
if [ -z "$SLURM_JOB_ID" ]; then echo "submit with sbatch"; fi && \
  srun bash -c "cd /opt/Megatron-LM && $SYNC && $CMD" || exit 1
"#;

#[test]
fn a_command_at_the_end_of_an_and_list_is_read_with_the_flags_lists_pick() {
    let config = read_launch_script(LIST_AND_LOOP_SCRIPT).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.seq_length, Some(32768));
    assert_eq!(config.context_parallel_size, Some(4));
    assert_eq!(config.precision, Some(Precision::Fp8Blockwise));
    assert_eq!(config.num_gpus, Some(16));
    // The file test guarding a flag counts as false, and says so.
    assert!(
        config
            .ignored_settings
            .iter()
            .any(|s| s.key.starts_with("[ -d /lustre/cache ] &&")),
        "{:?}",
        config.ignored_settings
    );
}

#[test]
fn bridges_train_sh_reads_its_slurm_options_and_forwards_the_rest_to_run_recipe() {
    // The command lines of Megatron-Bridge's model verification cards
    // (examples/model_verification_cards/gpt-oss-20b/card.yaml, 067f987d): train.sh runs
    // scripts/training/setup_experiment.py, which keeps --nodes/--gpus-per-node and the other
    // Slurm options and forwards the rest to run_recipe.py.
    let command = "./scripts/training/train.sh --nodes 2 --gpus-per-node 8 \\\n  \
        --account ACCT --partition batch --container-image nemo:26.06 --env HF_TOKEN \\\n  \
        --recipe gpt_oss_20b_sft_16gpu_h100_bf16_32k_config --mode lora --dataset tulu3 \\\n  \
        --max_steps 20 --seq_length 32768 --tensor_model_parallel_size 4 \\\n  \
        --context_parallel_size 2 model.cp_comm_type=a2a model.recompute_granularity=full \\\n  \
        model.recompute_method=uniform model.recompute_num_layers=1 logger.log_interval=1\n";
    let config = read_launch_script(command).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.num_gpus, Some(16), "nodes x GPUs per node");
    assert_eq!(config.seq_length, Some(32768));
    assert_eq!(config.tp(), 4);
    assert_eq!(config.cp(), 2);
    assert_eq!(config.peft, Some(true), "--mode lora trains adapters");
    assert_eq!(
        config.hardware.as_deref(),
        Some("h100"),
        "from the recipe's name"
    );
    assert_eq!(
        config.model,
        Some(moe_skills::model::ModelSpec::Id("gpt_oss_20b".into()))
    );
    let ignored: Vec<&str> = config
        .ignored_settings
        .iter()
        .map(|s| s.key.as_str())
        .collect();
    assert!(ignored.contains(&"--account ACCT"), "{ignored:?}");
    assert!(ignored.contains(&"--max_steps 20"), "{ignored:?}");
    // An option neither parser has is refused with the closest real one.
    let err = read_launch_script(
        "./scripts/training/train.sh --nodes 1 --gpus-per-node 8 --recipe x_config --seq_lenght 8\n",
    )
    .err()
    .unwrap_or_else(|| panic!("a misspelt option was read"))
    .to_string();
    assert!(err.contains("--seq_length"), "{err}");
    // A recipe named without any parallel size: the answer says its layout is not the recipe's.
    let bare = read_launch_script(
        "./scripts/training/train.sh --nodes 2 --gpus-per-node 8 \\\n  \
         --recipe qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config --mode pretrain\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let first = bare
        .assumed_defaults
        .first()
        .unwrap_or_else(|| panic!("no assumption listed"));
    assert_eq!(first.key, "recipe");
    assert!(first.why.contains("not the recipe's"), "{}", first.why);
    assert!(
        config.assumed_defaults.iter().all(|a| a.key != "recipe"),
        "sizes given: no such note"
    );
    // A train.sh of one's own is not Bridge's launcher: its command is looked for inside.
    let own = read_launch_script("./train.sh --nodes 2\n");
    assert!(own.is_err());
}

/// Megatron-LM's GPT-OSS example carries architecture flags the reader cannot build a model
/// from (`--window-size`, `--window-attn-skip-freq`). With a model named beside the script
/// (`--model`, a tool's `model` field, triage's model) the script takes that model and lists
/// its architecture flags as ignored, instead of refusing the whole script.
#[test]
fn a_model_named_beside_a_script_wins_over_flags_it_cannot_build() {
    use moe_skills::inputs::source::{read_config_text, read_config_text_for_model};
    use moe_skills::model::config::ModelSpec;
    let script = "torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 24 --hidden-size 2880 \
                  --num-attention-heads 64 --window-size 128,0 --window-attn-skip-freq 2 \
                  --tensor-model-parallel-size 2 --seq-length 8192 --bf16";
    let refused = read_config_text(script, None).unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("the architecture cannot be built"),
        "{refused}"
    );
    let model = ModelSpec::Id("gpt-oss-20b".into());
    let cfg = read_config_text_for_model(script, None, None, Some(&model)).unwrap();
    assert_eq!(cfg.model, Some(model));
    assert_eq!(cfg.tp(), 2);
    for flag in ["--window-attn-skip-freq", "--num-layers"] {
        assert!(
            cfg.ignored_settings.iter().any(|s| s.key == flag),
            "{flag}: {:?}",
            cfg.ignored_settings
        );
    }
    // The same over MCP: the tool's `model` beside `config_text`.
    let arguments = serde_json::json!({"config_text": script, "model": "gpt-oss-20b"});
    let cfg = moe_skills::tools::config_text::config_from_arguments(
        arguments.as_object().cloned().unwrap_or_default(),
    )
    .unwrap();
    assert_eq!(cfg.model, Some(ModelSpec::Id("gpt-oss-20b".into())));
}

#[test]
fn bridge_performance_launchers_offload_layers_switch_whole_layer_offloading_on() {
    // scripts/performance/utils/overrides.py (Megatron-Bridge v0.6.0): `-ol N` sets
    // cpu_offloading_num_layers N and, for N > 0, cpu_offloading.
    let command = "python scripts/performance/setup_experiment.py -m llama -mr llama3_70b \
        -g gb200 -ng 64 -c fp8_cs -tp 1 -pp 1 -mb 2 -gb 256 --seq_length 8192 -ol 40\n";
    let config = read_launch_script(command).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.cpu_offloading, Some(true));
    assert_eq!(config.cpu_offloading_num_layers, Some(40));
    assert!(
        config
            .ignored_settings
            .iter()
            .all(|s| !s.key.contains("-ol")),
        "{:?}",
        config.ignored_settings
    );
}
