"""Every ```python block of README.md and docs/*.md runs.

Each file's blocks run in order, in one namespace (a later block uses what an earlier one
defined, as a reader running them one after the other would), in a temporary working
directory. The files a page reads (a checkpoint, a Hugging Face directory) are made there
first by the page's setup below, with modulekit itself or torch; everything else a block
uses it defines itself.

Blocks that are not Python to run use another fence language (```text, ```bash,
```console). A Python block that cannot run here (it needs a cluster, Ray, Spark, a
download) is marked by an HTML comment on the line before its fence,
``<!-- docs-test: skip (the reason) -->``; it is reported as a skipped test with that reason.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import numpy as np
import pytest

import modulekit as mk
from modulekit import models, nn
from modulekit._ext import _openmp_helpers

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PYTHON = {"python", "py", "python3"}
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<lang>[^\s`]*)")
MARKER = re.compile(r"<!--\s*docs-test:\s*(?P<directive>.*?)\s*-->")
SKIP = re.compile(r"skip\s*\((?P<reason>.+)\)$")


class Block:
    """One fenced block: the page, the line of its opening fence, its language, its code and,
    for a Python block marked to be skipped, the reason."""

    def __init__(self, page: Path, line: int, lang: str, code: str, skip: str | None):
        self.page, self.line, self.lang, self.code, self.skip = page, line, lang, code, skip

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def parse(page: Path) -> list[Block]:
    """The fenced blocks of a Markdown page, with the skip marker each Python block carries.

    ``ValueError`` for a fence left open, or a docs-test marker that is malformed or not
    directly followed by a Python block (a marker must never silently mark nothing)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks, i, pending = [], 0, None
    while i < len(lines):
        text = lines[i]
        marker = MARKER.search(text)
        if marker:
            skip = SKIP.match(marker["directive"])
            if skip is None or not skip["reason"].strip():
                raise ValueError(f"{page.name}:{i + 1}: a docs-test marker must read "
                                 f"'<!-- docs-test: skip (reason) -->', got {text.strip()!r}")
            pending = (i + 1, skip["reason"].strip())
            i += 1
            continue
        opening = FENCE.match(text)
        if opening is None:
            if text.strip() and pending:
                raise ValueError(f"{page.name}:{pending[0]}: docs-test marker not followed "
                                 "by a fenced block")
            i += 1
            continue
        fence, indent, lang = opening["fence"], opening["indent"], opening["lang"].lower()
        start, body, i = i + 1, [], i + 1
        while i < len(lines) and not (lines[i].strip().startswith(fence)
                                      and not lines[i].strip().strip(fence[0])):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        if i == len(lines):
            raise ValueError(f"{page.name}:{start}: fence opened here is never closed")
        i += 1
        if pending and lang not in PYTHON:
            raise ValueError(f"{page.name}:{pending[0]}: docs-test marker before a "
                             f"{lang or 'plain'} block (only Python blocks run)")
        blocks.append(Block(page, start, lang, textwrap.dedent("\n".join(body)) + "\n",
                            pending[1] if pending else None))
        pending = None
    if pending:
        raise ValueError(f"{page.name}:{pending[0]}: docs-test marker at the end of the page")
    return blocks


# -- what each page's blocks read, made in the working directory before they run ----------

def _torch():
    return pytest.importorskip("torch")


def _mlp_sequential():
    """The 784-256-10 network of the README and the quickstart, as a modulekit Sequential."""
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))


def _save_torch(state, path):
    """``torch.save`` of a modulekit state dict, as PyTorch would write it."""
    torch = _torch()
    torch.save({k: torch.from_numpy(np.array(v)) for k, v in state.items()}, path)


def setup_readme():
    state = _mlp_sequential().state_dict()
    mk.save({f"body.{k}": v for k, v in state.items()}, "mlp.safetensors")


def setup_quickstart():
    torch = _torch()
    pytest.importorskip("dask.array")
    torch_mlp = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                                    torch.nn.Linear(256, 10))
    torch.save({f"body.{k}": v for k, v in torch_mlp.state_dict().items()}, "mlp.pt")
    _save_torch(models.resnet18().state_dict(), "resnet18.pth")
    _tiny_bert("all-MiniLM-L6-v2")


def _tiny_bert(directory):
    """A Hugging Face style BERT directory (config.json + model.safetensors), small."""
    from modulekit.models import BertConfig, BertModel

    config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64)
    Path(directory).mkdir()
    mk.save(BertModel(config).state_dict(), f"{directory}/model.safetensors")
    Path(directory, "config.json").write_text(json.dumps(dict(config)))


def setup_checkpoints():
    torch = _torch()
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    torch.save(net.state_dict(), "model.pt")


def setup_small_mlp():
    """The 20-64-3 classifier of the scikit-learn and Dask pages."""
    pytest.importorskip("sklearn")
    mlp = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 3))
    mk.save(mlp.state_dict(), "mlp.safetensors")


def setup_distributed():
    for name in ("dask.array", "dask.dataframe", "distributed", "pandas"):
        pytest.importorskip(name)
    setup_small_mlp()


def setup_transformers():
    _tiny_bert("all-MiniLM-L6-v2")


def setup_porting():
    _torch()


SETUP = {
    "README.md": setup_readme,
    "quickstart.md": setup_quickstart,
    "checkpoints.md": setup_checkpoints,
    "sklearn.md": setup_small_mlp,
    "distributed.md": setup_distributed,
    "transformers.md": setup_transformers,
    "porting.md": setup_porting,
}

BLOCKS = {page.name: parse(page) for page in PAGES}
RUNNABLE = [p.name for p in PAGES if any(b.lang in PYTHON and not b.skip for b in BLOCKS[p.name])]
SKIPPED = [b for p in PAGES for b in BLOCKS[p.name] if b.lang in PYTHON and b.skip]


@pytest.fixture
def restore_state():
    """Undo the thread count a page sets (``set_num_threads``) for the tests that follow."""
    yield
    _openmp_helpers.reset_num_threads()


@pytest.mark.parametrize("name", RUNNABLE)
def test_page_runs(name, tmp_path, monkeypatch, restore_state):
    """The page's Python blocks, in order, in one namespace, in a fresh directory."""
    monkeypatch.chdir(tmp_path)
    if name in SETUP:
        SETUP[name]()
    namespace = {"__name__": f"docs_{Path(name).stem}"}
    for block in BLOCKS[name]:
        if block.lang not in PYTHON or block.skip:
            continue
        code = compile(block.code, block.where, "exec")
        try:
            exec(code, namespace)
        except Exception as exc:
            raise AssertionError(f"the block at {block.where} raised {exc!r}") from exc


@pytest.mark.parametrize("block", SKIPPED, ids=[b.where for b in SKIPPED])
def test_marked_block_is_reported(block):
    """A block marked not to run is reported with its reason, never silently left out."""
    compile(block.code, block.where, "exec")  # still valid Python
    pytest.skip(f"{block.where}: {block.skip}")


def test_every_page_is_collected():
    assert {p.name for p in PAGES} >= {"README.md", "quickstart.md", "api.md", "porting.md"}
    assert set(SETUP) <= {p.name for p in PAGES}, "a setup for a page that does not exist"
    assert set(SETUP) <= set(RUNNABLE), "a setup for a page with nothing to run"
    assert len(SKIPPED) <= 3, "keep skipped blocks rare: make the block runnable instead"


def test_parse_finds_blocks_languages_and_markers(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(textwrap.dedent("""\
        # Title

        ```python
        a = 1
        ```

        ```bash
        pip install x
        ```

        <!-- docs-test: skip (needs a cluster (Ray)) -->
        ```python
        import ray
        ```

        - in a list:

          ```py
          b = a + 1
          ```
        """))
    blocks = parse(page)
    assert [(b.lang, b.code, b.skip) for b in blocks] == [
        ("python", "a = 1\n", None),
        ("bash", "pip install x\n", None),
        ("python", "import ray\n", "needs a cluster (Ray)"),
        ("py", "b = a + 1\n", None),
    ]
    assert [b.line for b in blocks] == [3, 7, 12, 18]


@pytest.mark.parametrize("text, message", [
    ("<!-- docs-test: skip () -->\n```python\nx\n```\n", "must read"),
    ("<!-- docs-test: run please -->\n```python\nx\n```\n", "must read"),
    ("<!-- docs-test: skip (why) -->\n\nsome prose\n```python\nx\n```\n", "not followed"),
    ("<!-- docs-test: skip (why) -->\n```text\nx\n```\n", "before a text block"),
    ("<!-- docs-test: skip (why) -->\n", "end of the page"),
    ("```python\nx = 1\n", "never closed"),
])
def test_parse_refuses_malformed_pages(tmp_path, text, message):
    page = tmp_path / "page.md"
    page.write_text(text)
    with pytest.raises(ValueError, match=message):
        parse(page)
