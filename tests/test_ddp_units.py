"""The multi-process launch path without training: argv and ports, procs per run, DDP arguments,
the ranks' shared sampling order, rank-0-only writes, and the launcher's failure report."""
from __future__ import annotations

import dataclasses
import sys

import pytest

from jobs.process.fake_runner import InProcessRunner
from jobs.process.run_job import DbReporter
from jobs.queue.failures import describe_exit, is_peer_loss
from jobs.queue.runner import DEFAULT_RENDEZVOUS_PORT, Launch, SubprocessRunner
from jobs.queue.worker import Worker
from jobs.specs.run import RunSpec
from jobs.training.sampling import BucketedSampler
from jobs.training.trainer import distributed_flags, steps_per_epoch, training_arguments
from storage.models import SUCCEEDED
from storage.settings import Settings
from tests.queue_support import fake_spec, qwb, wait_until  # noqa: F401
from workbench.errors import ConfigError
from workbench.services import runs

LAUNCHER_REPORT = """[rank0]: RuntimeError: Connection closed by peer [127.0.0.1]:4242
E1201 20:00:00 torch/distributed/elastic/multiprocessing/api.py:900] failed (exitcode: 1)
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
jobs.process.run_job FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-01_20:00:00
  host      : box
  rank      : 0 (local_rank: 0)
  exitcode  : 2 (pid: 11)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-01_20:00:00
  host      : box
  rank      : 1 (local_rank: 1)
  exitcode  : -11 (pid: 12)
  error_file: <N/A>
  traceback : Signal 11 (SIGSEGV) received by PID 12
============================================================"""


def test_cpu_processes_go_through_torchrun_on_a_free_port_of_their_own(tmp_path):
    runner = SubprocessRunner()
    two = Launch(5, 1, tmp_path, (), procs=2)
    assert two.world_size == 2 and two.device == "cpu x2"
    argv = runner.argv(two)
    assert argv[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert argv[argv.index("--nproc-per-node") + 1] == "2" and argv[argv.index("--max-restarts") + 1] == "0"
    assert argv[-5:] == ["-m", "jobs.process.run_job", "5", "--attempt", "1"]
    ports = {int(runner.argv(two)[argv.index("--master-port") + 1]) for _ in range(20)}
    assert len(ports) == 20 and DEFAULT_RENDEZVOUS_PORT not in ports  # two runs at once never collide
    gpus = runner.argv(Launch(5, 1, tmp_path, (0, 1), procs=2))
    assert "--multi_gpu" in gpus and int(gpus[gpus.index("--main_process_port") + 1]) != DEFAULT_RENDEZVOUS_PORT
    # one process: no launcher; with GPUs, procs is ignored (one process per GPU)
    assert runner.argv(Launch(5, 1, tmp_path, ()))[1:3] == ["-m", "jobs.process.run_job"]
    assert Launch(5, 1, tmp_path, (3,), procs=4).world_size == 1


def test_procs_per_run_come_from_the_spec_else_the_worker_setting(qwb):
    launched: list[Launch] = []

    class Recording(InProcessRunner):
        def launch(self, job, env):
            launched.append(job)
            return super().launch(job, env)

    qwb_three = dataclasses.replace(qwb.settings, cpu_procs=3)
    first = runs.submit_run(qwb, fake_spec(qwb))
    second = runs.submit_run(qwb, fake_spec(qwb, procs=2))
    worker = Worker(qwb, Recording(qwb), gpus=[], max_jobs=1)
    worker.procs = qwb_three.cpu_procs  # as `Worker(settings with WORKBENCH_CPU_PROCS=3)`
    assert wait_until(lambda: all(runs.get_run(qwb, r)["status"] == SUCCEEDED for r in (first, second)),
                      timeout=30, step=worker.loop_once)
    assert [(job.run_id, job.procs) for job in launched] == [(first, 3), (second, 2)]
    assert runs.get_run(qwb, first)["device"] == "cpu x3"
    assert Worker(qwb, Recording(qwb), gpus=[], procs=4).procs == 4
    assert Settings.from_env({"WORKBENCH_CPU_PROCS": "2"}).cpu_procs == 2
    with pytest.raises(ConfigError):
        Settings.from_env({"WORKBENCH_CPU_PROCS": "0"})
    with pytest.raises(ConfigError, match="procs"):
        RunSpec.from_dict({**fake_spec(qwb).to_dict(), "procs": 0})


def _hp(**overrides) -> dict:
    return {"batch_size": 4, "gradient_accumulation_steps": 1, "learning_rate": 1e-3, "weight_decay": 0.0,
            "warmup_ratio": 0.0, "epochs": 1, "max_steps": None, "eval_steps": None, "seed": 7,
            "precision": "auto", **overrides}


def test_several_cpu_processes_use_gloo_and_count_their_steps(tmp_path):
    # (TrainingArguments with WORLD_SIZE=2 would join a process group; the e2e tests build those)
    assert distributed_flags("cpu", 2) == {"ddp_backend": "gloo", "average_tokens_across_devices": False}
    assert distributed_flags("cpu", 1)["ddp_backend"] is None and distributed_flags("cuda", 2)["ddp_backend"] is None
    args = training_arguments(str(tmp_path), _hp(), "cpu", 64, "accuracy", True, ["labels"])
    assert args.use_cpu and args.ddp_backend is None and not args.average_tokens_across_devices
    # 64 examples, batches of 4 dealt to 2 processes: 8 steps; 17 batches: the last round is padded
    assert steps_per_epoch(64, 4, 1, 2) == 8 and steps_per_epoch(68, 4, 1, 2) == 9
    assert steps_per_epoch(64, 4, 2, 2) == 4 and steps_per_epoch(64, 4, 1) == 16


def test_ranks_draw_one_shared_order_per_epoch_and_alone_the_global_generator():
    import torch

    lengths = [3 + (i * 7) % 11 for i in range(40)]
    rank0, rank1 = BucketedSampler(lengths, 4, seed=42), BucketedSampler(lengths, 4, seed=42)
    torch.manual_seed(1)
    first = list(rank0)
    torch.manual_seed(2)  # the ranks' global generators differ: the order does not follow them
    assert list(rank1) == first and sorted(first) == list(range(40))
    rank0.set_epoch(1)
    rank1.set_epoch(1)
    assert list(rank0) == list(rank1) != first
    alone = BucketedSampler(lengths, 4)
    torch.manual_seed(3)
    drawn = list(alone)
    torch.manual_seed(3)
    assert list(alone) == drawn


def test_only_rank_zero_writes_progress_and_curves(qwb, monkeypatch):
    run_id = runs.submit_run(qwb, fake_spec(qwb))
    monkeypatch.setenv("RANK", "1")
    reporter = DbReporter(qwb.db, run_id, 0, interval=0.0)
    reporter.info({"total_steps": 10})
    reporter.progress(3, 10, 0.3)
    reporter.metrics(3, 0.3, {"train/loss": 0.5})
    record = runs.get_run(qwb, run_id)
    assert record["step"] in (0, None) and not record["total_steps"] and runs.run_curves(qwb, run_id) == {}


def test_the_launchers_report_names_the_rank_that_died():
    assert describe_exit(1, LAUNCHER_REPORT) == "the training process of rank 1 crashed (signal SIGSEGV) — see the log"
    killed = LAUNCHER_REPORT.replace("exitcode  : -11 (pid: 12)", "exitcode  : -9 (pid: 12)")
    assert describe_exit(1, killed).startswith("the training process of rank 1 was killed (SIGKILL)")
    assert describe_exit(1, "no report").startswith("the training process exited with code 1")
    assert is_peer_loss(RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer"))
    assert not is_peer_loss(ValueError("labels out of range"))


def test_procs_from_the_command_line(wb, monkeypatch, capsys, tmp_path):
    from tests.tiny_models import classification_records, write_jsonl
    from workbench.cli import main

    monkeypatch.setenv("WORKBENCH_HOME", str(wb.settings.home))
    data = write_jsonl(tmp_path / "d.jsonl", classification_records(20))

    def cli(*args: str) -> tuple[int, str, str]:
        with pytest.raises(SystemExit) as exc:
            main(list(args))
        captured = capsys.readouterr()
        return exc.value.code, captured.out, captured.err

    code, out, err = cli("train", "--task", "text-classification", "--data", str(data), "--procs", "2")
    assert code == 0, err
    assert runs.get_run(wb, int(out))["spec"]["procs"] == 2
    code, out, err = cli("train", "--task", "text-classification", "--data", str(data), "--procs", "0")
    assert code == 2 and "procs must be a whole number of processes, at least 1" in err
    code, out, err = cli("worker", "--procs", "0")
    assert code == 2 and "--procs 0: give at least 1" in err
    code, out, _ = cli("worker", "--help")
    assert code == 0 and "--procs" in out
