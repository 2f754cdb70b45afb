//! The evaluator against scripts shaped like the ones people run.

use super::syntax::glob_matches;
use super::*;

fn command(script: &str) -> Vec<String> {
    training_command(script)
        .unwrap_or_else(|_| panic!("no training command in {script}"))
        .words
}

#[test]
fn arrays_defaults_and_arithmetic_expand_as_bash_does() {
    let script = r#"#!/bin/bash
CKPT=${1:-"checkpoints/x"}   # positional with a default
GPUS_PER_NODE=8
NUM_NODES=${NUM_NODES:-2}
WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))
mkdir -p "$(dirname "$CKPT")"
DIST=(
--nproc_per_node $GPUS_PER_NODE   # per node
--nnodes $NUM_NODES
)
MODEL=(
--num-layers 4
--hidden-size 1024
)
DTYPE="fp8"
EXTRA=()
if [[ "$DTYPE" == "fp8" ]]; then
EXTRA+=(
    "--fp8-format hybrid"
    "--fp8-param-gather"
)
else
EXTRA+=(--bf16)
fi
MODEL+=("${EXTRA[@]}")
torchrun ${DIST[@]} \
"pretrain_gpt.py" \
${MODEL[@]} --pipeline-model-parallel-size $WORLD_SIZE --save "$CKPT"
"#;
    assert_eq!(
        command(script),
        [
            "torchrun",
            "--nproc_per_node",
            "8",
            "--nnodes",
            "2",
            "pretrain_gpt.py",
            "--num-layers",
            "4",
            "--hidden-size",
            "1024",
            "--fp8-format",
            "hybrid",
            "--fp8-param-gather",
            "--pipeline-model-parallel-size",
            "16",
            "--save",
            "checkpoints/x",
        ]
    );
    let notes = training_command(script)
        .map(|c| c.notes)
        .unwrap_or_default();
    assert!(notes
        .iter()
        .any(|n| n.key == "environment defaults" && n.reason.contains("NUM_NODES=2")));
}

#[test]
fn quoted_array_elements_stay_whole_and_unset_variables_stay_visible() {
    let script = "ARGS=(\"--split 99,1,0\" --seq-length 4096)\n\
                  python pretrain_gpt.py \"${ARGS[@]}\" --nnodes $SLURM_NNODES\n";
    assert_eq!(
        command(script),
        [
            "python",
            "pretrain_gpt.py",
            "--split 99,1,0",
            "--seq-length",
            "4096",
            "--nnodes",
            "$SLURM_NNODES"
        ]
    );
}

#[test]
fn what_cannot_be_expanded_stays_one_word_as_written() {
    let script = "CMD=\"python pretrain_gpt.py --x=$(hostname -s) --y $((UNSET * 2))\"\n\
                  bash -c \"$CMD\"\n";
    assert_eq!(
        command(script),
        [
            "python",
            "pretrain_gpt.py",
            "--x=$(hostname -s)",
            "--y",
            "$((UNSET * 2))"
        ]
    );
}

#[test]
fn an_echo_that_only_squeezes_blanks_is_computed() {
    let script = "O=\"\n  model.seq_length=4096 \\\n  train.micro_batch_size=2\"\n\
                  CMD=\"python run_recipe.py --recipe r $(echo \"$O\" | tr '\\n' ' ' | sed 's/  \\+/ /g')\"\n\
                  bash -c \"$CMD\"\n";
    assert_eq!(
        command(script),
        [
            "python",
            "run_recipe.py",
            "--recipe",
            "r",
            "model.seq_length=4096",
            "train.micro_batch_size=2"
        ]
    );
    // Another filter is not computed: the substitution stays as written.
    let other = "python x.py --a $(echo 1 | sed 's/1/2/g')\n";
    assert_eq!(command(other)[3], "$(echo 1 | sed 's/1/2/g')");
}

#[test]
fn machine_tests_are_false_and_noted_when_they_hold_flags() {
    let script = "ARGS=\"--bf16\"\n\
                  if [ -f /etc/fast ]; then\n  ARGS=\"$ARGS --fp8-format hybrid\"\nfi\n\
                  if [ ! -f pretrain_gpt.py ]; then echo missing; exit 1; fi\n\
                  while [[ $# -gt 0 ]]; do\n  case $1 in\n    --x) shift ;;\n  esac\ndone\n\
                  python pretrain_gpt.py $ARGS\n";
    let read = training_command(script).unwrap_or_else(|_| panic!("no command"));
    assert_eq!(read.words, ["python", "pretrain_gpt.py", "--bf16"]);
    // The argument loop's `--x)` is a case pattern, not a flag: no note for it.
    assert_eq!(read.notes.len(), 1, "{:?}", read.notes);
    assert!(read.notes[0].key.starts_with("if [ -f /etc/fast ]"));
}

#[test]
fn a_command_string_run_by_srun_is_followed() {
    let script = "TP=${TP:-2}\nARGS=(--tensor-model-parallel-size ${TP} --bf16)\n\
                  CMD=\"\ncd /workspace;\nexport PYTHONPATH=/workspace;\n\
                  python /workspace/pretrain_gpt.py ${ARGS[@]}\"\n\
                  sbatch <<EOF\nsrun --mpi=pmix bash -x -c \"${CMD}\" 2>&1 | tee log\nEOF\n";
    assert_eq!(
        training_command(script).ok().and_then(|c| c.sbatch_gpus),
        None
    );
    let with_nodes = format!("#SBATCH --nodes=4\n#SBATCH --ntasks-per-node=8\n{script}");
    assert_eq!(
        training_command(&with_nodes)
            .ok()
            .and_then(|c| c.sbatch_gpus)
            .map(|g| g.0),
        Some(32)
    );
    assert_eq!(
        command(script),
        [
            "python",
            "/workspace/pretrain_gpt.py",
            "--tensor-model-parallel-size",
            "2",
            "--bf16"
        ]
    );
}

#[test]
fn clustered_shell_options_run_their_string_and_python_c_does_not() {
    let script = "srun bash -lc \"set -euo pipefail; python train.py --seq-length 8\"\n";
    assert_eq!(command(script), ["python", "train.py", "--seq-length", "8"]);
    let python = "python -c \"import os; os.system('python x.py --a 1')\" run.py --b 2\n";
    assert_eq!(
        command(python)[..2],
        ["python".to_string(), "-c".to_string()]
    );
}

#[test]
fn elif_and_else_take_exactly_one_branch() {
    let script = "P=bf16\nif [ \"$P\" = fp8 ]; then A=--fp8-format; \
                  elif [ \"$P\" = bf16 ]; then A=--bf16; else A=--fp16; fi\n\
                  python pretrain_gpt.py $A\n";
    assert_eq!(command(script), ["python", "pretrain_gpt.py", "--bf16"]);
}

#[test]
fn a_loop_over_configurations_reads_the_first_and_names_the_rest() {
    let script = "CONFIGS=(\"2,4\" \"4,2\")\n\
                  for CONFIG in \"${CONFIGS[@]}\"; do\n\
                  \x20 IFS=',' read -r TP PP <<< \"$CONFIG\"\n\
                  \x20 CMD=\"python run_recipe.py --recipe x_pretrain_config\"\n\
                  \x20 CMD=\"$CMD model.tensor_model_parallel_size=$TP model.pipeline_model_parallel_size=$PP\"\n\
                  \x20 srun bash -c \"$CMD\"\n\
                  done\n";
    let read = training_command(script).unwrap_or_else(|_| panic!("no command"));
    assert_eq!(
        read.words,
        [
            "python",
            "run_recipe.py",
            "--recipe",
            "x_pretrain_config",
            "model.tensor_model_parallel_size=2",
            "model.pipeline_model_parallel_size=4"
        ]
    );
    assert!(read
        .notes
        .iter()
        .any(|n| n.key == "other training commands" && n.reason.contains("2 training commands")));
}

#[test]
fn read_splits_a_here_string_on_ifs() {
    let mut shell = Shell::default();
    let words = |text: &str| split_words(text);
    shell.read(&words("IFS=,"), &words("read -r A B C <<< a,b,c,d"));
    let get = |shell: &Shell, name: &str| match shell.vars.get(name) {
        Some(Var::Scalar(s)) => s.clone(),
        other => panic!("{name}: {other:?}"),
    };
    assert_eq!(get(&shell, "A"), "a");
    assert_eq!(get(&shell, "B"), "b");
    // The last name takes the rest, separators included.
    assert_eq!(get(&shell, "C"), "c,d");
    shell.read(&[], &words("read X Y <<< \"one two three\""));
    assert_eq!(get(&shell, "X"), "one");
    assert_eq!(get(&shell, "Y"), "two three");
}

#[test]
fn case_runs_the_first_matching_branch_and_echo_runs_nothing() {
    let script = "DATASET=${DATASET:-squad}\n\
                  case \"$DATASET\" in\n\
                  \x20 openmath*)\n    SEQ=4096\n    ;;\n\
                  \x20 squad|custom) SEQ=2048 ;;\n\
                  \x20 *) SEQ=1024 ;;\n\
                  esac\n\
                  CMD=\"python pretrain_gpt.py \\\n  --seq-length $SEQ\"\n\
                  echo $CMD --and-more\n\
                  $CMD\n";
    assert_eq!(
        command(script),
        ["python", "pretrain_gpt.py", "--seq-length", "2048"]
    );
    assert!(glob_matches("open*2*", "openmathinstruct2_thinking"));
    assert!(glob_matches("a?c", "abc"));
    assert!(!glob_matches("a*d", "abc"));
}

#[test]
fn a_here_document_fed_to_python_is_not_read_as_shell() {
    // The Python line would otherwise win: it carries more flags than the real command.
    let script = "python - \"$ROOT\" <<'PY'\n\
                  pretrain_gpt.py --tensor-model-parallel-size --seq-length --bf16 --lr\n\
                  PY\n\
                  torchrun pretrain_gpt.py --tensor-model-parallel-size 2\n";
    assert_eq!(
        command(script),
        [
            "torchrun",
            "pretrain_gpt.py",
            "--tensor-model-parallel-size",
            "2"
        ]
    );
    // `<<-` strips the terminator's leading tabs.
    let tabs = "python3 <<-EOF\n\tpretrain_gpt.py --a --b --c --d\n\tEOF\n\
                python pretrain_gpt.py --bf16\n";
    assert_eq!(command(tabs), ["python", "pretrain_gpt.py", "--bf16"]);
}

#[test]
fn a_called_function_runs_with_its_arguments() {
    let script = "launch() {\n  local tp=$1\n  shift\n  \
                  torchrun pretrain_gpt.py --tensor-model-parallel-size $tp \"$@\"\n}\n\
                  launch 4 --bf16 --seq-length 8192\n";
    assert_eq!(
        command(script),
        [
            "torchrun",
            "pretrain_gpt.py",
            "--tensor-model-parallel-size",
            "4",
            "--bf16",
            "--seq-length",
            "8192"
        ]
    );
    // Defined but never called: nothing runs.
    assert!(training_command("unused() {\n  python pretrain_gpt.py --bf16\n}\n").is_err());
    // A function calling itself stops at the nesting limit.
    let recursive = "f() {\n  f\n  python pretrain_gpt.py --bf16\n}\nf\n";
    assert_eq!(command(recursive), ["python", "pretrain_gpt.py", "--bf16"]);
}

#[test]
fn a_file_of_flag_variables_names_them() {
    // Megatron-LM's examples/post_training/modelopt/conf/*/*.sh: variables for a script that
    // sources the file.
    let conf = "if [ -z ${HF_MODEL_CKPT} ]; then\n  HF_MODEL_CKPT=Qwen/Qwen3-30B-A3B\nfi\n\
                MODEL_ARGS=\" \\\n    --num-layers 48 \\\n    --hidden-size 2048\"\n\
                TP=2\n";
    let none = training_command(conf)
        .err()
        .unwrap_or_else(|| panic!("read a command"));
    assert_eq!(none.flag_variables, ["MODEL_ARGS"]);
    assert!(none.programs.is_empty() && none.utilities.is_empty());
    let setup = "set -euo pipefail\npip install -r requirements.txt\nmkdir -p out\n";
    let none = training_command(setup)
        .err()
        .unwrap_or_else(|| panic!("read a command"));
    assert_eq!(none.utilities, ["set", "pip", "mkdir"]);
}

#[test]
fn a_script_without_a_python_command_names_what_it_runs() {
    let none = |script: &str| match training_command(script) {
        Ok(command) => panic!("read a training command {:?}", command.words),
        Err(none) => none.programs,
    };
    assert!(none("--tensor-model-parallel-size 2 --bf16").is_empty());
    assert!(none("echo hello\nexit 0\n").is_empty());
    assert!(none("TP=2\nPP=4\n").is_empty());
    let conversion = "set -euo pipefail\nWORKSPACE=${WORKSPACE:-/workspace}\n\
        mkdir -p out\n./scripts/conversion/convert.sh import \\\n  --hf-model org/m \\\n  \
        --megatron-path \"${WORKSPACE}/models/m\"\n";
    assert_eq!(none(conversion), ["./scripts/conversion/convert.sh"]);
    assert_eq!(
        none("srun --nodes 2 bash -c \"nemo-run launch --gpus 8\"\n"),
        ["nemo-run"]
    );
}

#[test]
fn self_doubling_arrays_stop_the_evaluation_and_say_so() {
    let mut script = String::from("A=(--x 1)\n");
    for _ in 0..40 {
        script.push_str("A=(\"${A[@]}\" \"${A[@]}\")\n");
    }
    script.push_str("python pretrain_gpt.py ${A[@]}\n");
    let read = training_command(&script);
    // Stopped before the command: no command, and nothing grew without bound.
    assert!(read.is_err());
    let nested = format!(
        "X=${{{}}}\npython pretrain_gpt.py $X\n",
        "A:-${".repeat(500)
    );
    let _ = training_command(&nested);
    let deep = format!(
        "X=$(({}1{}))\npython pretrain_gpt.py $X\n",
        "(".repeat(5000),
        ")".repeat(5000)
    );
    let _ = training_command(&deep);
}

#[test]
fn arithmetic_refuses_what_it_cannot_compute() {
    let mut shell = Shell::default();
    assert_eq!(shell.arithmetic("2 * (3 + 4) - 1"), Some(13));
    assert_eq!(shell.arithmetic("$UNSET * 2"), None);
    assert_eq!(shell.arithmetic("9223372036854775807 + 1"), None);
    assert_eq!(shell.arithmetic("1 / 0"), None);
}

#[test]
fn and_or_lists_run_what_their_statuses_select() {
    // Commands are taken to succeed: the chain runs, the fallback does not.
    let chain = "mkdir -p /tmp/run && cd /tmp/run && python pretrain_gpt.py --bf16 || exit 1\n";
    assert_eq!(command(chain), ["python", "pretrain_gpt.py", "--bf16"]);
    // Tests have their computed status, in both directions.
    let pick = |mode: &str| {
        command(&format!(
            "MODE={mode}\nARGS=()\n\
             [ \"$MODE\" = fp8 ] && ARGS+=(--fp8-format hybrid) || ARGS+=(--bf16)\n\
             python pretrain_gpt.py \"${{ARGS[@]}}\"\n"
        ))
    };
    assert_eq!(
        pick("fp8"),
        ["python", "pretrain_gpt.py", "--fp8-format", "hybrid"]
    );
    assert_eq!(pick("bf16"), ["python", "pretrain_gpt.py", "--bf16"]);
    assert_eq!(
        command("false && X=--a || X=--b\ntrue || X=--c\npython train.py $X\n"),
        ["python", "train.py", "--b"]
    );
    // A list continuing an `if` block, or a loop, runs its tail.
    let after_fi = "if [ -z \"$X\" ]; then X=1; fi && python pretrain_gpt.py --bf16\n";
    assert_eq!(command(after_fi), ["python", "pretrain_gpt.py", "--bf16"]);
    let after_done = "for c in a; do :; done && python pretrain_gpt.py --c\n";
    assert_eq!(command(after_done), ["python", "pretrain_gpt.py", "--c"]);
}

#[test]
fn a_machine_test_guarding_flags_in_a_list_is_false_and_noted() {
    let script = "[ -d /data/fast ] && EXTRA=\"--fp8-format hybrid\"\n\
                  [ -d /data ] && DATA=/data || DATA=/tmp/data\n\
                  python pretrain_gpt.py --data-path $DATA\n";
    let read = training_command(script).unwrap_or_else(|_| panic!("no command"));
    assert_eq!(
        read.words,
        ["python", "pretrain_gpt.py", "--data-path", "/tmp/data"]
    );
    // Only the skipped part that holds flags is noted.
    assert_eq!(read.notes.len(), 1, "{:?}", read.notes);
    assert_eq!(
        read.notes[0].key,
        "[ -d /data/fast ] && EXTRA=\"--fp8-format hybrid\""
    );
    assert!(read.notes[0].unread);
}

#[test]
fn while_loops_run_while_their_test_holds() {
    let counted = "i=0\nARGS=()\nwhile [ $i -lt 3 ]; do\n  ARGS+=(--x$i)\n  i=$((i+1))\ndone\n\
                   python train.py \"${ARGS[@]}\"\n";
    assert_eq!(
        command(counted),
        ["python", "train.py", "--x0", "--x1", "--x2"]
    );
    let until =
        "A=\nn=2\nuntil [ $n -eq 0 ]; do A=\"$A --u$n\"; n=$((n-1)); done\npython t.py $A\n";
    assert_eq!(command(until), ["python", "t.py", "--u2", "--u1"]);
    // `break` ends `while true` after one run; the `if` it leaves is closed, so what follows
    // the loop runs.
    let retry = "while true; do\n  if true; then\n    python pretrain_gpt.py --bf16\n    break\n  \
                 fi\ndone\npython pretrain_gpt.py --bf16 --after\n";
    let read = training_command(retry).unwrap_or_else(|_| panic!("no command"));
    assert_eq!(
        read.words,
        ["python", "pretrain_gpt.py", "--bf16", "--after"]
    );
    assert!(read.notes.is_empty(), "{:?}", read.notes);
    // `continue` skips the rest of one run.
    let skip = "A=\nfor c in a b c; do\n  [ \"$c\" = b ] && continue\n  A=\"$A --$c\"\ndone\n\
                python t.py $A\n";
    assert_eq!(command(skip), ["python", "t.py", "--a", "--c"]);
    // A test that never turns false stops at the loop budget, and says so.
    let endless = "while true; do A=1; done\npython t.py --a\n";
    let read = training_command(endless).unwrap_or_else(|_| panic!("no command"));
    assert_eq!(read.words, ["python", "t.py", "--a"]);
    assert!(
        read.notes.iter().any(|n| n.key == "while true"
            && n.reason
                .contains(&format!("after {MAX_LOOP_ITERATIONS} runs"))),
        "{:?}",
        read.notes
    );
}

#[test]
fn a_loop_on_run_time_input_is_not_run_and_is_noted_when_it_adds_flags() {
    let script = "while read -r line; do\n  ARGS+=(--$line)\ndone < flags.txt\n\
                  python pretrain_gpt.py --bf16 ${ARGS[@]}\n";
    let read = training_command(script).unwrap_or_else(|_| panic!("no command"));
    assert_eq!(read.words[..3], ["python", "pretrain_gpt.py", "--bf16"]);
    assert_eq!(read.notes.len(), 1, "{:?}", read.notes);
    assert_eq!(read.notes[0].key, "while read -r line");
    // With no script arguments an argument loop runs nothing, and nothing is noted.
    let arguments = "while [[ $# -gt 0 ]]; do\n  case $1 in\n    --tp) TP=$2; shift 2;;\n  \
                     esac\ndone\npython pretrain_gpt.py --tensor-model-parallel-size ${TP:-2}\n";
    let read = training_command(arguments).unwrap_or_else(|_| panic!("no command"));
    assert_eq!(read.words[3], "2");
    assert!(
        read.notes.iter().all(|n| !n.key.starts_with("while")),
        "{:?}",
        read.notes
    );
}

#[test]
fn double_bracket_equality_matches_a_glob_pattern_and_single_bracket_does_not() {
    let script = "MODELS=\"clip llm\"\nA=\nB=\n\
                  if [[ \" $MODELS \" == *\" llm \"* ]]; then A=--llm; fi\n\
                  if [ \"x$MODELS\" = \"x*\" ]; then B=--literal; fi\n\
                  [[ $MODELS != clip* ]] && B=--not-clip\n\
                  python t.py $A $B\n";
    assert_eq!(command(script), ["python", "t.py", "--llm"]);
}

#[test]
fn a_wrapper_forwarding_its_arguments_says_they_are_unknown() {
    let read = training_command("exec uv run python train.py --bf16 \"$@\"\n")
        .unwrap_or_else(|_| panic!("no command"));
    assert_eq!(
        read.words,
        ["exec", "uv", "run", "python", "train.py", "--bf16"]
    );
    assert_eq!(read.notes.len(), 1, "{:?}", read.notes);
    assert_eq!(read.notes[0].key, "\"$@\"");
    assert!(read.notes[0].unread);
    // Inside a function, "$@" is the call's arguments, which are known.
    let called = "run() {\n  python train.py \"$@\"\n}\nrun --bf16\n";
    let read = training_command(called).unwrap_or_else(|_| panic!("no command"));
    assert_eq!(read.words, ["python", "train.py", "--bf16"]);
    assert!(read.notes.is_empty(), "{:?}", read.notes);
}

#[test]
fn a_library_of_functions_names_the_ones_it_never_calls() {
    let script = "wait_daemon() {\n  while pgrep -u $USER python; do sleep 1; done\n}\n\
                  used() {\n  true\n}\nused\n";
    let none = training_command(script)
        .err()
        .unwrap_or_else(|| panic!("a command"));
    assert_eq!(none.uncalled_functions, ["wait_daemon"]);
    assert!(none.programs.is_empty());
}

#[test]
fn an_empty_quoted_array_gives_no_word() {
    let script = "EXTRA=()\npython t.py --a \"${EXTRA[@]}\" \"\" \"x${EXTRA[@]}\"\n";
    // bash: no word for the empty array, an empty word for `""`, `x` for the prefixed one.
    assert_eq!(command(script), ["python", "t.py", "--a", "", "x"]);
}
