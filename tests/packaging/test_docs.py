"""The docs a newcomer reads state the current figures: every result file in bench/results is cited by a current
doc (docs/*.md but the changelog, or README.md), and the two reference pages stay short enough to take in at once."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = sorted((ROOT / "bench" / "results").glob("*.json"))
# The changelog is history: a file only it names is no current figure's source, so it does not count.
CURRENT_DOCS = [ROOT / "README.md", *(p for p in sorted((ROOT / "docs").glob("*.md")) if p.name != "CHANGELOG.md")]


def test_there_are_results_and_docs():
    assert len(RESULTS) >= 10 and len(CURRENT_DOCS) >= 10


@pytest.mark.parametrize("result", RESULTS, ids=lambda p: p.name)
def test_every_result_is_cited_by_a_current_doc(result):
    citing = [doc.name for doc in CURRENT_DOCS if result.name in doc.read_text(encoding="utf-8")]
    assert citing, f"bench/results/{result.name} is cited by no current doc: cite it, or git rm it"


@pytest.mark.parametrize("page", ["benchmarks.md", "drafter.md"])
def test_reference_pages_are_short(page):
    lines = (ROOT / "docs" / page).read_text(encoding="utf-8").count("\n")
    assert lines < 200, f"docs/{page}: {lines} lines; history goes to docs/CHANGELOG.md"
