"""``uniagent-verl-dataset`` from a tasks.jsonl, read back by verl's own ``RLHFDataset``."""

from __future__ import annotations

import json
from pathlib import Path

import verl_harness as h
from transformers import AutoTokenizer
from verl.utils.dataset.rl_dataset import RLHFDataset

from uniagent_verl.agent_loop import task_of_row
from uniagent_verl.dataset import main


def test_jsonl_to_parquet_that_verl_reads(model_dir: Path, tmp_path: Path) -> None:
    tasks = [
        {"id": "a", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "find x"}], "metadata": {"files": ["x"]}},
        {"id": "b", "messages": [{"role": "user", "content": "find y"}], "metadata": {"answer": 3}},
        {"id": "c", "messages": [{"role": "user", "content": "find z"}], "metadata": {}},
    ]
    src = tmp_path / "file_lookup.jsonl"
    src.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    out = tmp_path / "train.parquet"
    assert main([str(src), str(out), "--skip", "1"]) == 0

    config = h.trainer_config(model_dir, n=1, prompt_length=256, response_length=16)
    dataset = RLHFDataset(data_files=[str(out)], tokenizer=AutoTokenizer.from_pretrained(model_dir), config=config.data)
    assert len(dataset) == 2
    for i, task in enumerate(tasks[1:]):
        row = dataset[i]
        assert row["raw_prompt"] == task["messages"]
        assert row["data_source"] == "uniagent/file_lookup"
        assert row["agent_name"] == "uniagent"
        assert row["reward_model"] == {"style": "rule", "ground_truth": ""}
        assert row["index"] == i
        # The task comes back exactly (no null keys from another task's metadata).
        assert task_of_row(row) == task
