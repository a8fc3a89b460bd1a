"""Shared fixtures: the repository's tiny Qwen2 as a complete Hugging Face model directory."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
TINY_QWEN2 = REPO_ROOT / "crates/uniagent-train/tests/fixtures/tiny-qwen2"
QWEN_TOKENIZER = REPO_ROOT / "crates/uniagent-core/tests/fixtures/tokenizers/qwen2.5"

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on a fresh event loop (the tests need no pytest-asyncio)."""
    return asyncio.run(coro)


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Hugging Face model directory: the tiny Qwen2's weights and config (randomly initialised,
    vocabulary 151936) with the Qwen2.5 tokenizer fixture, whose vocabulary it shares. Made of
    symbolic links in a temporary directory; the fixtures themselves stay where they are."""
    out = tmp_path_factory.mktemp("tiny-qwen2-hf")
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        os.symlink(TINY_QWEN2 / name, out / name)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        os.symlink(QWEN_TOKENIZER / name, out / name)
    return out
