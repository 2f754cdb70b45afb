"""What the scripts that write a held-out file of measured runs share: reading a git tree,
reading a configuration with the server's own readers, and writing the file."""

import argparse
import json
import subprocess

import yaml


def git(source, *args, text=True):
    """Output of a git command on the git directory `source`."""
    return subprocess.run(
        ["git", "--git-dir", source, *args], check=True, capture_output=True, text=text
    ).stdout


def source_arguments(description, what, default_output):
    """The command line every generator takes: the source git directory, the server binary,
    the revision and the output file; with the revision resolved to its commit and date."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("source", help=f"{what} git directory")
    parser.add_argument("--binary", required=True)
    parser.add_argument("--rev", default="HEAD")
    parser.add_argument("-o", "--output", default=default_output)
    args = parser.parse_args()
    commit = git(args.source, "rev-parse", args.rev).strip()
    date = git(args.source, "log", "-1", "--format=%cI", commit).strip()
    return args, commit, date


def check_config(binary, config_file, hardware, gpus):
    """The server's JSON answer for `check --config config_file` on `gpus` GPUs of `hardware`,
    or None and the first line of what it said instead."""
    out = subprocess.run(
        [binary, "--json", "check", "--config", config_file,
         "--hardware", hardware, "--num-gpus", str(gpus)],
        capture_output=True, text=True,
    )
    try:
        return json.loads(out.stdout), None
    except json.JSONDecodeError:
        return None, " ".join((out.stderr or out.stdout).strip().splitlines()[:1])


def write_runs(path, header, repository, commit, runs, skipped):
    """Writes the runs under a comment header that names their source and what was not
    replayed."""
    lines = header + [f"# not replayed: {s}" for s in skipped]
    doc = {"source": {"repository": repository, "commit": commit}, "runs": runs}
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
        yaml.safe_dump(doc, f, sort_keys=False, width=100, allow_unicode=True)
    print(f"{len(runs)} runs written to {path}; {len(skipped)} not replayed")
