"""What the scripts that write a held-out file of measured runs share: reading a git tree,
reading a configuration with the server's own readers, and writing the file."""

import json
import subprocess

import yaml


def git(source, *args, text=True):
    """Output of a git command on the git directory `source`."""
    return subprocess.run(
        ["git", "--git-dir", source, *args], check=True, capture_output=True, text=text
    ).stdout


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
