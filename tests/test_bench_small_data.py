"""bench/small_data.py's table and README summary: what a reader is told about each cell's origin."""
from __future__ import annotations

from bench import small_data


def _cell(score: float, **extra) -> dict:
    return {"score": score, "seconds": 10.0, "n_train": 300, "load": 1.0, "cpu_s": 20.0, "others_cores": 0.0, **extra}


def test_a_cell_copied_from_another_results_file_is_marked_and_the_mark_explained():
    results = {"amazon/300/0/majority": _cell(0.59), "amazon/300/0/workbench": _cell(0.83, copied_from="elsewhere"),
               "amazon/300/1/workbench": _cell(0.80, copied_from="elsewhere")}
    text = small_data.table(results)
    row = next(line for line in text.splitlines() if line.startswith("| 300 |"))
    assert row.endswith("0.815 ± 0.021 (10 s, 2 seeds)§ |"), row
    assert "§ the runs of the same code path kept in another results file" in text
    plain = small_data.table({"amazon/300/0/workbench": _cell(0.83)})
    assert "§" not in plain


def test_the_summary_leaves_out_a_set_the_default_was_not_run_on_and_names_earlier_defaults():
    results = {"movies/100/0/tfidf_lr": _cell(0.65), "trec/1000/0/workbench": _cell(0.915),
               "trec/1000/0/workbench_cls_head": _cell(0.913)}
    text = small_data.summary(results)
    assert "movie reviews" not in text
    assert "**0.915** · default, [CLS] classifier (before ddff0a4) 0.913" in text
