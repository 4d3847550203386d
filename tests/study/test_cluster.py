"""--executor: the cells grouped into jobs (a model's cells in one job), and a run through submitit's local
executor (one subprocess per job, two model jobs at once on the CPU) giving the folder a sequential run gives."""

import pytest

from vrh.study.cluster import group_jobs, parse_parameters
from vrh.study.kinds import build_cells
from vrh.study.spec import load_study

from .conftest import write_study
from .folders import differences


def test_a_models_cells_share_one_job_and_a_transfer_gets_its_own(tmp_path):
    jobs = group_jobs(build_cells(load_study(write_study(tmp_path))))
    ids = [[c.id for c in job] for job in jobs]
    assert ids[:3] == [["data/world"], ["data/world_refcoco"], ["data/world_vqa"]]
    a = next(j for j in ids if j[0] == "detect/A/world")
    assert a == ["detect/A/world", "detect/A/world_refcoco", "sweep/A/world", "sweep/A/world_refcoco",
                 "crosstask/A/world_vqa", "compare/A/world"]
    b = next(j for j in ids if j[0] == "detect/B/world")
    assert "stability/B/world" in b and all(c.startswith(("detect/B", "sweep/B", "crosstask/B", "stability/B"))
                                            for c in b)
    assert ["transfer/A_to_B/world"] in ids and len(ids) == 6


def test_parameters_are_read_as_json_values_or_text():
    assert parse_parameters(["gpus_per_node=1", "slurm_partition=gpu"]) == {"gpus_per_node": 1,
                                                                           "slurm_partition": "gpu"}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_parameters(["timeout_min"])


def test_the_study_name_in_a_slurm_job_name_is_letters_digits_and_dashes():
    from vrh.study.cluster import job_name

    assert job_name("organisms") == "vrh-study-organisms"
    assert job_name("x\n#SBATCH --wrap=rm\x1b") == "vrh-study-x_SBATCH_--wrap_rm_"


def test_the_local_executor_gives_the_folder_of_a_sequential_run(small_study, tmp_path):
    from vrh.study.cluster import submit_study

    path, reference = small_study
    out = tmp_path / "local"
    rep = submit_study(load_study(path), out, cluster="local",
                       parameters={"timeout_min": 20, "cpus_per_task": 1, "gpus_per_node": 0}, log=lambda m: None)
    assert sorted(rep.ran) == sorted(c.id for c in build_cells(load_study(path)))
    assert rep.model_loads == {"A": 1, "B": 2}  # B's job, then the transfer job (another process)
    assert differences(reference, out) == []


def test_on_slurm_each_job_is_submitted_with_afterok_on_the_jobs_it_needs(tmp_path, monkeypatch):
    """Stand-in ``sbatch`` / ``srun`` on PATH record each submission file (no cluster here); the jobs' results
    are not waited for. A model's job depends on its datasets' jobs, the transfer job on both models' jobs."""
    import os
    import re

    import submitit

    from vrh.study.cluster import submit_study

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(f"""#!/usr/bin/env bash
n=$(( $(ls {tmp_path}/sub_*.sh 2>/dev/null | wc -l) + 101 ))
cp "$1" {tmp_path}/sub_$n.sh
echo "Submitted batch job $n"
""")
    (bin_dir / "sbatch").chmod(0o755)
    (bin_dir / "srun").write_text("#!/usr/bin/env bash\nexit 1\n")  # submitit looks for srun to know slurm is there
    (bin_dir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(submitit.core.core.Job, "result", lambda self: {"ran": [], "seconds": {}, "model_loads": {}})
    study = load_study(write_study(tmp_path))
    submit_study(study, tmp_path / "out", cluster="slurm", parameters={"slurm_partition": "gpu", "gpus_per_node": 1},
                 log=lambda m: None)
    subs = {int(p.stem[4:]): p.read_text() for p in tmp_path.glob("sub_*.sh")}
    assert len(subs) == 6 and all("#SBATCH --partition=gpu" in t and "#SBATCH --gpus-per-node=1" in t
                                  for t in subs.values())
    deps = {n: re.search(r"#SBATCH --dependency=afterok:(\S+)", t) for n, t in subs.items()}
    deps = {n: sorted(map(int, m.group(1).split(":"))) if m else [] for n, m in deps.items()}
    # submission order: 3 dataset jobs (101-103), A's cells (104), B's cells (105), the transfer (106)
    assert deps[101] == deps[102] == deps[103] == []
    assert deps[104] == [101, 102, 103] and deps[105] == [101, 102, 103] and deps[106] == [101, 104, 105]


def test_a_linked_job_folder_is_refused_before_submitit_writes_into_it(tmp_path):
    """Issue 45's rule: submitit's job files go under DIR/.study/jobs, never through a link there."""
    pytest.importorskip("submitit")
    from vrh.runs.safe_paths import SymlinkRefused
    from vrh.study.cluster import submit_study

    victim = tmp_path / "victim"
    victim.mkdir()
    (tmp_path / "out" / ".study").mkdir(parents=True)
    (tmp_path / "out" / ".study" / "jobs").symlink_to(victim)
    with pytest.raises(SymlinkRefused, match=r"jobs is a symlink inside"):
        submit_study(load_study(write_study(tmp_path)), tmp_path / "out", cluster="local", log=lambda m: None)
    assert list(victim.iterdir()) == []
