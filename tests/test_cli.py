"""The CLI in-process on a tiny random-init Qwen2.5-VL checkpoint saved to disk."""

import json
import os
import subprocess
import sys

import pytest

from vrh import runs
from vrh.cli import build_parser, commands, main


def test_help_lists_commands(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for mod in commands():
        assert mod.NAME in out


@pytest.mark.parametrize("mod", [m for m in commands() if hasattr(m, "Config")], ids=lambda m: m.NAME)
def test_every_option_has_help_and_shows_its_default(mod):
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[mod.NAME]
    for action in sub._actions:
        if action.dest in ("help",):
            continue
        assert action.help, f"{mod.NAME} {action.option_strings} has no help"
        if not action.required and action.nargs != 0:
            assert "(default:" in action.help, f"{mod.NAME} {action.option_strings} does not show its default"


def test_options_that_mask_are_on_every_masking_command():
    parser = build_parser()
    subs = next(a for a in parser._actions if a.dest == "command").choices
    for name in ("evaluate", "sweep", "compare", "transfer", "stability", "dpo-pairs", "demo"):
        flags = {s for a in subs[name]._actions for s in a.option_strings}
        assert "--mask-mode" in flags, name
        assert "--resume" in flags and "--overwrite" in flags, name


def test_detect_then_evaluate_write_complete_run_folders(tmp_path, tiny_checkpoint, tiny_dataset):
    det = tmp_path / "det"
    assert main(["detect", "--model", tiny_checkpoint, "--data", tiny_dataset, "--n", "6", "--out", str(det),
                 "--max-new-tokens", "8", "--batch-size", "4",
                 "--scorers", "out/sum/mean,in/argmax/freq,retrieval_heads"]) == 0
    cfg = runs.read_json(det / runs.CONFIG)
    assert cfg["command"] == "detect" and cfg["data"]["n_detect"] == 6 and len(cfg["eval_ids"]) == 6
    assert cfg["environment"]["transformers"] and cfg["data"]["sha256"]
    hs = runs.read_json(det / runs.HEAD_SCORES)
    L, H = hs["num_layers"], hs["num_heads"]
    assert len(hs["scores"]) == L and len(hs["scores"][0]) == H and len(hs["ranking"]) == L * H
    assert set(hs["variants"]) == {"out/sum/mean", "in/argmax/freq", "retrieval_heads"}
    assert hs["capture_forwards"] == 2  # one capture pass per batch serves every scorer
    samples = runs.read_jsonl(det / runs.SAMPLES)
    assert len(samples) == 6 and all("outcome" in s for s in samples)
    assert not set(s["id"] for s in samples) & set(cfg["eval_ids"])

    ev = tmp_path / "ev"
    assert main(["evaluate", "--model", tiny_checkpoint, "--data", tiny_dataset, "--mask-heads", str(det),
                 "--k", "2", "--out", str(ev), "--max-new-tokens", "8"]) == 0
    res = runs.read_json(ev / runs.RESULTS)
    assert res["n"] == 6 and 0.0 <= res["accuracy"] <= 1.0 and res["schema_version"] == runs.SCHEMA_VERSION
    assert sorted(res["masked_heads"]) == sorted(hs["ranking"][:2]) and res["k"] == 2
    assert {r["id"] for r in runs.read_jsonl(ev / runs.SAMPLES)} == set(cfg["eval_ids"])

    rnd = tmp_path / "rnd"
    assert main(["evaluate", "--model", tiny_checkpoint, "--data", tiny_dataset, "--mask-heads", str(det),
                 "--k", "2", "--random", "--seed", "3", "--out", str(rnd), "--max-new-tokens", "8"]) == 0
    masked = runs.read_json(rnd / runs.RESULTS)["masked_heads"]
    assert len(masked) == 2 and not {tuple(h) for h in masked} & {tuple(h) for h in hs["ranking"][:2]}

    sw = tmp_path / "sw"
    assert main(["sweep", "--model", tiny_checkpoint, "--data", tiny_dataset, "--heads", str(det), "--ks", "0,1,2",
                 "--seeds", "0,1", "--out", str(sw), "--max-new-tokens", "8", "--n", "4"]) == 0
    res = runs.read_json(sw / runs.RESULTS)
    assert res["k"] == [0, 1, 2] and len(res["vrh"]["accuracy"]) == 3
    assert res["random"]["seeds"] == [0, 1] and all(len(a) == 2 for a in res["random"]["accuracy"])
    assert res["vrh"]["accuracy"][0] == res["baseline_accuracy"]
    lines = runs.read_jsonl(sw / runs.SAMPLES)
    assert len(lines) == 4 * (1 + 2 * (1 + 2)) and {l["kind"] for l in lines} == {"none", "top_k", "random"}

    vqa = tmp_path / "sw_vqa"  # VQA samples of the detection run's own dataset (once: "no vqa samples")
    assert main(["sweep", "--model", tiny_checkpoint, "--data", tiny_dataset, "--heads", str(det), "--ks", "0,1",
                 "--seeds", "0", "--task", "vqa", "--out", str(vqa), "--max-new-tokens", "4", "--n", "3"]) == 0

    rep = tmp_path / "report"
    assert main(["report", str(det), str(ev), str(rnd), str(sw), "--out", str(rep), "--k", "2"]) == 0
    html = (rep / "report.html").read_text()
    assert "data:image/png;base64" in html and "http://" not in html and "https://" not in html


def test_bad_input_is_a_clear_error(tmp_path, tiny_checkpoint, tiny_dataset, capsys):
    assert main(["evaluate", "--model", tiny_checkpoint, "--data", tiny_dataset, "--mask-heads", "99:0",
                 "--out", str(tmp_path / "x")]) == 2
    assert "outside" in capsys.readouterr().err
    assert main(["evaluate", "--model", tiny_checkpoint, "--data", tiny_dataset, "--mask-heads",
                 str(tmp_path / "no_such_run"), "--out", str(tmp_path / "y")]) == 2
    assert "no such detection run folder" in capsys.readouterr().err


def test_a_non_empty_out_is_refused_and_nothing_is_deleted(tmp_path, tiny_checkpoint, tiny_dataset, capsys):
    other = tmp_path / "other"
    with runs.RunFolder(other) as run:  # an earlier vrh run
        run.write_config({"command": "evaluate"})
    (other / runs.RESULTS).write_text('{"accuracy": 0.9}')
    args = ["detect", "--model", tiny_checkpoint, "--data", tiny_dataset, "--n", "2", "--out", str(other),
            "--max-new-tokens", "4"]
    assert main(args) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert json.loads((other / runs.RESULTS).read_text()) == {"accuracy": 0.9}
    assert main(args + ["--overwrite"]) == 0
    assert runs.read_json(other / runs.RESULTS)["n_scored"] == 2


def test_interrupted_sweep_resumes_to_the_same_result(tmp_path, tiny_checkpoint, tiny_dataset, capsys):
    det = tmp_path / "det"
    assert main(["detect", "--model", tiny_checkpoint, "--data", tiny_dataset, "--n", "6", "--out", str(det),
                 "--max-new-tokens", "8"]) == 0
    sw = tmp_path / "sw"
    args = ["sweep", "--model", tiny_checkpoint, "--data", tiny_dataset, "--heads", str(det), "--ks", "0,1",
            "--seeds", "0,1", "--out", str(sw), "--max-new-tokens", "8", "--n", "4"]
    assert main(args) == 0
    full = runs.read_json(sw / runs.RESULTS)
    lines = (sw / runs.SAMPLES).read_text().splitlines()
    # a crash after 5 of 16 records, mid-write of the 6th
    (sw / runs.SAMPLES).write_text("\n".join(lines[:5]) + "\n" + lines[5][:10])
    (sw / runs.RESULTS).unlink()
    assert main(args + ["--resume"]) == 0
    again = runs.read_json(sw / runs.RESULTS)
    assert again["vrh"] == full["vrh"] and again["random"] == full["random"]
    resumed = runs.read_jsonl(sw / runs.SAMPLES)
    assert len(resumed) == len(lines) and resumed[:5] == [json.loads(l) for l in lines[:5]]
    capsys.readouterr()
    assert main(args[:-2] + ["--n", "3", "--resume"]) == 2  # another config cannot resume this run
    assert "config.n: 4 -> 3" in capsys.readouterr().err


def test_killed_evaluate_resumes_with_nothing_lost_or_repeated(tmp_path, kill_mid_run):
    """A real SIGKILL mid-run (not a simulated exception), then --resume."""
    from vrh.organism.world import write_split

    data = write_split(tmp_path / "data", 160, seed=41_000, task="grounding")
    out = tmp_path / "ev"
    cmd = [sys.executable, "-m", "vrh", "evaluate", "--model", "organism", "--data", str(data), "--mask-heads", "3:3",
           "--batch-size", "4", "--max-new-tokens", "24", "--threads", "1", "--out", str(out)]
    env = {**os.environ, "VRH_NO_PROGRESS": "1"}
    samples = out / runs.SAMPLES
    kill_mid_run(cmd, env, lambda: samples.exists() and len(samples.read_text().splitlines()) >= 12)
    n_before = len(runs.read_jsonl(out / runs.SAMPLES))
    assert 12 <= n_before < 160 and not (out / runs.RESULTS).exists()
    assert subprocess.run(cmd + ["--resume"], env=env, capture_output=True).returncode == 0
    ids = [r["id"] for r in runs.read_jsonl(out / runs.SAMPLES)]
    assert len(ids) == len(set(ids)) == 160
    assert runs.read_json(out / runs.RESULTS)["n"] == 160


def test_model_argument_forms(tmp_path):
    from vrh.models.loading import load_model, resolve_model_path

    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_model(str(tmp_path / "missing"))
    # a hub id is not mistaken for a missing folder: it reaches the (offline) hub lookup instead
    with pytest.raises(OSError) as e:
        load_model("some-org/some-model")
    assert "does not exist" not in str(e.value)
    assert resolve_model_path("some-org/some-model") == "some-org/some-model"


def test_bad_detection_input_fails_before_the_model_loads(tmp_path, tiny_dataset, capsys, monkeypatch):
    import vrh.models.loading

    monkeypatch.setattr(vrh.models.loading, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    out = tmp_path / "d"
    assert main(["detect", "--model", "x", "--data", tiny_dataset, "--scorers", "nosuch", "--out", str(out)]) == 2
    assert "nosuch" in capsys.readouterr().err and not out.exists()
    assert main(["detect", "--model", "x", "--data", tiny_dataset, "--n", "200", "--out", str(out)]) == 2
    assert "12 grounding samples" in capsys.readouterr().err and not out.exists()


def test_k_outside_the_model_is_refused_naming_the_option(tmp_path, tiny_checkpoint, tiny_dataset, capsys):
    det = tmp_path / "det"
    assert main(["detect", "--model", tiny_checkpoint, "--data", tiny_dataset, "--n", "4", "--out", str(det),
                 "--max-new-tokens", "4"]) == 0
    capsys.readouterr()
    base = ["--model", tiny_checkpoint, "--data", tiny_dataset, "--max-new-tokens", "4"]
    assert main(["evaluate", *base, "--mask-heads", str(det), "--k", "100", "--out", str(tmp_path / "e1")]) == 2
    err = capsys.readouterr().err
    assert "--k 100" in err and "heads" in err  # names the option and the model's head count
    assert main(["evaluate", *base, "--mask-heads", str(det), "--k", "5", "--random", "--out", str(tmp_path / "e2")]) == 2
    assert "--k 5" in capsys.readouterr().err  # 8 heads: no 5 random heads outside the top-5
    assert main(["sweep", *base, "--heads", str(det), "--ks", "0,33", "--out", str(tmp_path / "s")]) == 2
    assert "--ks" in capsys.readouterr().err


def test_a_leading_separator_is_accepted(capsys):
    """`torchrun ... -m vrh -- COMMAND` may hand vrh the `--` that kept torchrun's parser off vrh's options."""
    assert main(["--", "models", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)


# --- hostile input at the command line: one line, exit 2 -----------------------------------------------
@pytest.fixture
def organism_data_with_a_huge_prompt(tmp_path):
    """Organism grounding samples; the second one's expression is longer than the organism's context (256)."""
    from vrh.organism.world import write_split

    path = write_split(tmp_path / "d", 4, 11, "grounding")
    lines = [json.loads(l) for l in path.read_text().splitlines()]
    lines[1]["expression"] = " ".join(["the red circle"] * 200)  # ~600 tokens
    path.write_text("".join(json.dumps(l) + "\n" for l in lines))
    return path, lines[1]["id"]


def test_a_prompt_beyond_the_context_is_a_counted_skip_with_its_length(tmp_path, organism_data_with_a_huge_prompt):
    data, long_id = organism_data_with_a_huge_prompt
    assert main(["evaluate", "--model", "organism", "--data", str(data), "--out", str(tmp_path / "ev"),
                 "--max-new-tokens", "24", "--no-disjoint"]) == 0
    res = runs.read_results(tmp_path / "ev")
    assert res["n"] == 3 and res["skipped_samples"]["n"] == 1
    skip = res["skipped_samples"]["samples"][0]
    assert skip["id"] == long_id and "exceed the model's context of 256 positions" in skip["reason"]
    assert long_id not in {r["id"] for r in runs.read_samples(tmp_path / "ev")}
    assert main(["detect", "--model", "organism", "--data", str(data), "--n", "4", "--out", str(tmp_path / "det"),
                 "--max-new-tokens", "24"]) == 0
    hs = runs.read_head_scores(tmp_path / "det")
    assert hs.n_scored == 3 and [s["id"] for s in hs.skipped if "context" in s["reason"]] == [long_id]


def test_a_cuda_device_on_a_cpu_only_torch_is_one_line(tmp_path, tiny_checkpoint, tiny_dataset, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert main(["evaluate", "--model", tiny_checkpoint, "--data", tiny_dataset, "--device", "cuda",
                 "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "--device cuda" in err and "sees no CUDA GPU" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_ctrl_c_is_one_line_saying_how_to_resume(tmp_path, tiny_checkpoint, tiny_dataset, capsys, monkeypatch):
    import vrh.experiments.runner

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(vrh.experiments.runner, "run_conditions", interrupted)
    out = tmp_path / "ev"
    assert main(["evaluate", "--model", tiny_checkpoint, "--data", tiny_dataset, "--out", str(out)]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"vrh evaluate: interrupted; what finished is kept in {out}; rerun the same command with " \
                      f"--resume to continue in {out}"
    assert not any("Traceback" in line for line in err)


def test_a_torn_detection_state_and_an_unreadable_file_are_one_line(tmp_path, tiny_checkpoint, tiny_dataset, capsys):
    out = tmp_path / "det"
    args = ["detect", "--model", tiny_checkpoint, "--data", tiny_dataset, "--n", "4", "--out", str(out),
            "--max-new-tokens", "4", "--batch-size", "2"]
    assert main(args) == 0
    for name in (runs.RESULTS, runs.HEAD_SCORES):  # as if killed before the end, with a kept batch torn
        (out / name).unlink()
    (out / runs.DETECT_STATE).mkdir()
    (out / runs.DETECT_STATE / "batch-000000.pt").write_bytes(b"PK\x03\x04 torn")
    capsys.readouterr()
    assert main(args + ["--resume"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("vrh ")]
    assert len(err) == 1 and "batch-000000.pt: not a readable detection batch state" in err[0]
    loop = tmp_path / "loop.jsonl"
    loop.symlink_to(loop)
    assert main(["evaluate", "--model", tiny_checkpoint, "--data", str(loop), "--out", str(tmp_path / "e")]) == 2
    assert "loop.jsonl is a symlink that leads nowhere" in capsys.readouterr().err


def test_the_readmes_real_model_sequence_parses_as_written():
    """README "On a real model": every command line of the block is valid vrh syntax once its variables are set."""
    import re
    import shlex
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = re.search(r"## On a real model.*?```bash\n(.*?)```", readme, flags=re.S).group(1)
    env = dict(re.findall(r'(\w+)=("[^"]*"|\S+?)(?:;|\s|$)', block.splitlines()[1]))
    lines = [l.split("#")[0] for l in block.splitlines() if l.startswith("vrh ")]
    assert len(lines) >= 5 and lines[0].startswith("vrh data convert")
    parser = build_parser()
    for line in lines:
        for k, v in env.items():
            line = line.replace(f"${k}", v.strip('"'))
        args = parser.parse_args(shlex.split(line)[1:])  # SystemExit (exit 2) on anything invalid
        assert args.command


def _walkthrough_commands() -> list[tuple[str, str]]:
    """The vrh command lines a new user runs in order (issue 26: the README's set-up, commands, DPO and study
    blocks, then docs/dpo.md and docs/study.md), continuation lines joined, as (page, line). Left out: the
    blocks for a real model, a cluster or several GPUs (their paths are placeholders)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text().split("## Multi-GPU")[0]
    readme = re.sub(r"## On a real model.*?```bash\n.*?```", "", readme, count=1, flags=re.S)
    pages = [("README.md", readme), ("docs/dpo.md", (root / "docs/dpo.md").read_text()),
             ("docs/study.md", (root / "docs/study.md").read_text())]
    out = []
    for page, text in pages:
        for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
            for line in block.replace("\\\n", " ").splitlines():
                for part in line.split(" #")[0].split("&&"):
                    part = part.strip().removeprefix("/usr/bin/time -v ").strip()
                    if part.startswith("vrh ") and "/shared/" not in part:
                        out.append((page, part))
    return out


def test_the_walkthroughs_commands_never_write_into_an_earlier_commands_folder():
    """docs/dpo.md's `vrh dpo --out runs/dpo` came after the README's `vrh dpo-pairs --out runs/dpo` and was
    refused (folder not empty), as was its re-measure block's `vrh demo --out runs/demo` after the set-up's. A
    later command may reuse an --out only as the same command line, or with --overwrite / --resume; `vrh study`
    is exempt (a rerun checks and continues by design)."""
    import shlex

    lines = _walkthrough_commands()
    assert len(lines) >= 20 and any(p == "docs/dpo.md" for p, _ in lines)  # the pages were read
    first: dict[str, tuple[str, str]] = {}
    for page, line in lines:
        argv = shlex.split(line)
        if "--out" not in argv or argv[1] == "study":
            continue
        out = argv[argv.index("--out") + 1]
        if out in first and first[out][1] != line and not {"--overwrite", "--resume"} & set(argv):
            pytest.fail(f"{page}: `{line}` writes {out}, which `{first[out][1]}` ({first[out][0]}) filled")
        first.setdefault(out, (page, line))


def test_the_walkthroughs_commands_and_the_readmes_launcher_lines_parse():
    """The README's "CPU-only test of the machinery" ran `-m vrh -- evaluate --data d.jsonl` without the
    required --model (exit 2). Every walkthrough line, and every launcher line (`-m vrh`) without a `...`
    placeholder, is valid vrh syntax once the variables its page set are substituted."""
    import re
    import shlex
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text()
    shell = "\n".join(re.findall(r"```bash\n(.*?)```", readme, flags=re.S)).replace("\\\n", " ")
    launched = [re.sub(r"\s+", " ", l.split("-m vrh", 1)[1]).removeprefix(" --").strip()
                for l in shell.splitlines() if "-m vrh" in l and "..." not in l]
    assert len(launched) >= 3
    lines = [("README.md", "vrh " + l) for l in launched] + _walkthrough_commands()
    docs = "".join((root / "docs" / p).read_text() for p in ("dpo.md", "study.md"))
    env = dict(re.findall(r"^(\w+)=(\S+)", shell + "\n".join(re.findall(r"```bash\n(.*?)```", docs, flags=re.S)),
                          flags=re.M))
    parser = build_parser()
    for page, line in lines:
        line = re.sub(r"\$(\w+)", lambda m: env[m.group(1)].split(";")[0], line)
        try:
            assert parser.parse_args(shlex.split(line)[1:]).command
        except SystemExit:
            pytest.fail(f"{page}: `{line}` does not parse")


def _no_model_load(monkeypatch):
    import vrh.models.loading

    monkeypatch.setattr(vrh.models.loading, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))


def test_a_k_nothing_would_read_is_refused(tmp_path, tiny_dataset, capsys, monkeypatch):
    """`vrh evaluate --k 3` without --mask-heads or --random masked nothing and said "0 heads masked"; with a
    head list the list's length is the k. Both refused before the model loads (issue 26 item 9)."""
    _no_model_load(monkeypatch)
    base = ["evaluate", "--model", "x", "--data", tiny_dataset]
    assert main([*base, "--k", "3", "--out", str(tmp_path / "e")]) == 2
    assert "--k 3 needs --mask-heads" in capsys.readouterr().err and not (tmp_path / "e").exists()
    assert main([*base, "--mask-heads", "0:1,1:0", "--k", "3", "--out", str(tmp_path / "e")]) == 2
    assert "not used with a head list" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["detect", "--model", "x", "--n", "4"], ["evaluate", "--model", "x"],
                                  ["compare", "--model", "x", "--n", "4"], ["demo"]], ids=lambda a: a[0])
def test_an_existing_out_is_refused_before_the_model_loads(argv, tmp_path, tiny_dataset, capsys, monkeypatch):
    """The refusal came after loading (9 s on the organism, minutes on a 7B) (issue 26 item 20)."""
    _no_model_load(monkeypatch)
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("mine")
    data = [] if argv == ["demo"] else ["--data", tiny_dataset]
    assert main([*argv, *data, "--out", str(out)]) == 2
    assert "is not empty; pass --overwrite" in capsys.readouterr().err
    assert main([*argv, *data, "--out", str(out), "--overwrite"]) == 2  # not a vrh run: never deleted
    assert "not a vrh run folder" in capsys.readouterr().err and (out / "mine.txt").read_text() == "mine"


def test_results_go_to_stdout_and_the_default_k_scales(tmp_path, tiny_checkpoint, tiny_dataset, capsys):
    """detect prints its top heads (LAYER:HEAD, with scores), sweep its accuracy per k (VRH vs random) on
    stdout; progress and notes stay on stderr (issue 26 item 13). Without --k, evaluate masks 10% of the
    heads and says so (issue 26 item 8)."""
    from vrh.options import default_k

    det, sw, ev = tmp_path / "det", tmp_path / "sw", tmp_path / "ev"
    base = ["--model", tiny_checkpoint, "--data", tiny_dataset, "--max-new-tokens", "4", "--batch-size", "4"]
    assert main(["detect", *base, "--n", "6", "--out", str(det)]) == 0
    cap = capsys.readouterr()
    hs = runs.read_head_scores(det)
    top = hs.ranking()[0]
    assert f"{top[0]}:{top[1]}" in cap.out and "score" in cap.out and "samples scored" not in cap.out.split("\n")[-2]
    assert "model:" in cap.err and f"{hs.num_layers} layers x {hs.num_heads} heads" in cap.err
    # the random-init model finds no object: said loudly (issue 26 item 10)
    correct = sum(r["outcome"] == "correct" for r in runs.read_samples(det))
    assert correct == 0 and "answered none of the 6 detection samples correctly" in cap.err
    assert main(["sweep", *base, "--heads", str(det), "--ks", "0,1,2", "--seeds", "0,1", "--n", "4",
                 "--out", str(sw)]) == 0
    cap = capsys.readouterr()
    assert "top-k detected heads" in cap.out and "k random heads" in cap.out and "-> " in cap.err
    k = default_k(hs.num_layers, hs.num_heads)
    assert main(["evaluate", *base, "--mask-heads", str(det), "--n", "2", "--out", str(ev)]) == 0
    assert f"masking {k} of {hs.num_layers * hs.num_heads} heads" in capsys.readouterr().err
    assert runs.read_results(ev)["k"] == k


def test_evaluate_transfer_stability_and_dpo_pairs_print_their_result_on_stdout(tmp_path, tiny_checkpoint,
                                                                                 tiny_dataset, capsys):
    """evaluate's accuracy, transfer's four accuracies, stability's overlaps and dpo-pairs' pair count went to
    stderr with the progress (stability's Fig. 8b accuracies were printed nowhere), so ``vrh evaluate ... > acc.txt`` kept nothing (issue 26 item 13, as detect, sweep
    and compare). dpo-pairs' stdout stays a script: its counts are shell comments before the next commands.
    Accuracies print as percentages, as demo, sweep, compare and dpo print them (issue 46 item 9)."""
    base = ["--model", tiny_checkpoint, "--max-new-tokens", "4", "--batch-size", "4"]
    name = os.path.basename(tiny_checkpoint)  # transfer names its models (A and B are organisms too)
    det = tmp_path / "det"
    assert main(["detect", *base, "--data", tiny_dataset, "--n", "6", "--scorers", "out/sum/mean,rand1/sum/mean",
                 "--out", str(det)]) == 0
    capsys.readouterr()
    cases = [
        (["evaluate", *base, "--data", tiny_dataset, "--mask-heads", str(det), "--k", "2", "--n", "2"],
         lambda r: 100 * r["accuracy"], "evaluate: accuracy {:.1f}% on 2 samples"),
        (["transfer", *base, "--data", tiny_dataset, "--heads", str(det), "--k", "1", "--seeds", "0", "--n", "2"],
         lambda r: 100 * r["baseline_accuracy"], f"transfer: {name} unmasked {{:.1f}}%, {name}'s top-1"),
        (["stability", *base, "--heads", str(det), "--k", "1", "--n-values", "2", "--bootstrap", "2",
          "--n-eval", "2", "--accuracy-draws", "1"], lambda r: r["topk_overlap_mean"][0],
         "stability: top-1 overlap n=2: {:.2f}"),
        (None, lambda r: 100 * r["token_choice"]["rand1_accuracy"], "masked (Fig. 8b): rand1/sum/mean {:.1f}%, "),
        (None, lambda r: 100 * r["accuracy_mean"][0], "of each draw masked (mean over draws) n=2: {:.1f}%"),
        (["dpo-pairs", *base, "--heads", str(det), "--k", "1", "--n", "3"],
         lambda r: r["n_pairs"], "# dpo-pairs: {} pairs from 3 samples"),
    ]
    for argv, value, line in cases:  # argv None: another line of the run before
        if argv is not None:
            out = tmp_path / argv[0]
            assert main([*argv, "--out", str(out)]) == 0
            cap = capsys.readouterr()
            assert "model:" in cap.err  # the notes stay on stderr (stdout may name the model in a result line)
            assert not any(ln.startswith("model:") for ln in cap.out.splitlines())
        expected = line.format(value(runs.read_results(out)))
        assert expected in cap.out and expected not in cap.err, (out.name, cap.out, cap.err)
    script = [ln for ln in cap.out.splitlines() if ln and not ln.startswith("#")]
    assert script and all(ln.startswith("vrh ") for ln in script)  # dpo-pairs: only comments and commands


def test_two_pass_help_says_what_the_flag_does():
    """The help of --two-pass read as if the flag turned one-pass capture on (issue 26 item 18)."""
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices["detect"]
    text = next(a.help for a in sub._actions if "--two-pass" in a.option_strings)
    first = text.split(". ")[0]
    assert "re-run prompt + answer text teacher-forced" in first and "while generating" not in first


def test_a_reader_that_leaves_early_gets_no_error():
    """``vrh models | head``: the closed pipe is the reader's choice, not an error (exit 141, nothing on stderr)."""
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-m", "vrh", "models"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()
    err = p.stderr.read().decode()
    p.stderr.close()
    assert p.wait() == 141 and err == ""


def test_a_failed_write_names_the_file(tmp_path, capsys, monkeypatch):
    """A write that fails on a full disk raises an OSError without a filename, so the error said only "No space
    left on device" (issue 33 item 10): it names the file that was being written now."""
    import errno
    import io

    from vrh.commands import models

    class FullDisk(io.FileIO):  # what a full disk does: write() fails, and the error carries no filename
        def write(self, b):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    target = tmp_path / "run" / "results.json"
    target.parent.mkdir()

    def full(args):
        with io.TextIOWrapper(io.BufferedWriter(FullDisk(target, "w"))) as f:
            json.dump({"accuracy": 0.5}, f)

    def failing_in_c(args):  # raised inside the C io layer (no Python frame of its own), a reader open beside it
        with open(__file__) as source, open(target, "w") as f:
            os.dup2(source.fileno(), f.fileno())  # f's descriptor now reads a file: its write fails
            f.write("{}")
            f.flush()

    for command, message in ((full, "No space left on device"), (failing_in_c, "Bad file descriptor")):
        monkeypatch.setattr(models, "main", command)
        assert main(["models"]) == 2
        assert capsys.readouterr().err == f"vrh models: error: {message}: {target}\n"


@pytest.mark.parametrize("argv, hint", [
    (["sweep", "--model", "m", "--data", "d", "--heads", "h", "--out", "o", "--k", "3"], "did you mean --ks for --k?"),
    (["sweep", "--model", "m", "--data", "d", "--heads", "h", "--out", "o", "--seed", "1"], "did you mean --seeds"),
    (["evaluate", "--model", "m", "--data", "d", "--out", "o", "--mask-head", "0:0"], "did you mean --mask-heads"),
    (["data", "convert", "refcoco", "src", "--out", "o", "--overwrit"], "did you mean --overwrite"),
])
def test_an_abbreviated_or_unknown_flag_is_refused_with_the_commands_usage(argv, hint, capsys):
    """Issue 37 item 7: `vrh sweep --k 3` ran as `--ks 3` (argparse's prefix matching), and an unknown flag
    showed the top-level usage line."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    command = " ".join(a for a in argv[:2] if not a.startswith("-") and a in ("sweep", "evaluate", "data", "convert"))
    assert e.value.code == 2 and f"usage: vrh {command}" in err and hint in err, err


def test_ctrl_c_while_the_model_loads_names_no_folder_as_kept(tmp_path, tiny_checkpoint, tiny_dataset, capsys,
                                                              monkeypatch):
    """Interrupted before --out exists (the model still loading): it says so, and offers no --resume of a folder
    that is not there (issue 45 item 17)."""
    import vrh.models.loading

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(vrh.models.loading, "load_model", interrupted)
    out = tmp_path / "ev"
    assert main(["evaluate", "--model", tiny_checkpoint, "--data", tiny_dataset, "--out", str(out)]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"vrh evaluate: interrupted before anything was written ({out} was not created yet)"
    assert not out.exists()


def test_a_full_disk_at_the_lock_names_the_lock_file(tmp_path, tiny_checkpoint, tiny_dataset, capsys, monkeypatch):
    import errno

    def full(fd, data, offset):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("vrh.runs.folder.os.pwrite", full)
    out = tmp_path / "ev"
    assert main(["evaluate", "--model", tiny_checkpoint, "--data", tiny_dataset, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"vrh evaluate: error: No space left on device: {out / '.vrh-lock'}"
