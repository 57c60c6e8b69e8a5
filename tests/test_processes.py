"""rococo_eval.processes: the ranks a launcher gives, the shares of the work, and a world of one without it.

The process group itself is joined by real torchrun launches in ``test_cli_distributed.py``.
"""

import pytest

from rococo_eval.processes import ONE, Processes, join, launched, rank_device, share


@pytest.mark.parametrize("count", [0, 1, 2, 7, 10, 101])
@pytest.mark.parametrize("world", [1, 2, 3, 8])
def test_shares_are_contiguous_and_cover_every_item_once(count, world):
    shares = [share(count, rank, world) for rank in range(world)]
    assert [index for part in shares for index in part] == list(range(count))
    assert max(map(len, shares)) - min(map(len, shares)) <= 1


def test_torchrun_and_slurm_environments_are_read():
    assert launched({"RANK": "1", "WORLD_SIZE": "3", "LOCAL_RANK": "1", "SLURM_PROCID": "9"}) == (1, 3, 1)
    assert launched({"SLURM_PROCID": "5", "SLURM_STEP_NUM_TASKS": "8", "SLURM_LOCALID": "1"}) == (5, 8, 1)
    assert launched({"RANK": "0"}) is None
    # the batch script of `sbatch --ntasks 4` (or a `salloc -n 4` shell): one process, not rank 0 of 4
    assert launched({"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0"}) is None


@pytest.mark.parametrize("environment, problem", [
    ({"RANK": "3", "WORLD_SIZE": "2"}, "RANK is 3, outside 0 to WORLD_SIZE - 1 = 1"),
    ({"RANK": "one", "WORLD_SIZE": "2"}, "must be integers, got ['one', '2', None]"),
])
def test_a_bad_launch_environment_is_refused_by_name(environment, problem):
    with pytest.raises(ValueError) as error:
        launched(environment)
    assert problem in str(error.value)


def test_one_process_joins_no_group():
    assert join(environ={}) is ONE and join(environ={"RANK": "0", "WORLD_SIZE": "1"}) is ONE
    ONE.barrier()  # nothing to wait for
    assert ONE.name == "rank 0 of 1" and ONE.is_main


def test_slurm_without_a_master_address_is_refused():
    with pytest.raises(ValueError, match="MASTER_ADDR is not set: export MASTER_ADDR"):
        join(environ={"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2", "SLURM_LOCALID": "0"})


def test_each_gpu_process_takes_its_local_gpu():
    assert rank_device(Processes(3, 4, 1, "nccl"), None) == "cuda:1"
    assert rank_device(Processes(3, 4, 1, "nccl"), "cuda:0") == "cuda:0"  # asked for: kept
    assert rank_device(Processes(1, 2, 1, "gloo"), None) is None


def test_main_first_makes_it_once_with_one_process():
    made = []
    assert ONE.main_first(lambda: made.append("made") or len(made)) == 1
    assert made == ["made"]
