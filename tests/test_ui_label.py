"""The Label tab as plain functions (no browser): creating a project, the keys (label, accept the suggestion,
skip, undo; multi-label ticks), the suggestion highlighted, the progress and the learning curve, the hand-off,
and "send to relabel" from an audit. Real SQLite; no job runs (suggestions and estimates are written as a refit
would write them)."""
from __future__ import annotations

import json
from pathlib import Path

import gradio as gr
import pytest
from sqlalchemy import select, update

from storage.models import EVENT_LABEL, EVENT_SKIP, Audit, LabelEstimate, LabelEvent, LabelItem
from workbench.ui import audit_panel, label_tab, plots


def _pool(tmp_path: Path, n: int = 12) -> Path:
    path = tmp_path / "pool.csv"
    path.write_text("id,text\n" + "".join(f"t{i},message number {i}\n" for i in range(n)), encoding="utf-8")
    return path


def _project(wb, tmp_path, multi: bool = False, labels: str = "spam: unwanted ads\nham") -> dict:
    project, message = label_tab.create(wb, _pool(tmp_path), labels, "", multi, "ann")
    assert f"Project **{project['id']}**" in message and "12 texts" in message
    return project


def _values(out: tuple) -> dict:
    """The outputs of an item's answer by name: text, held, ticks, rest (and the nine keys when a project is
    opened)."""
    return {"text": out[0], "held": out[1], "ticks": out[2], "rest": out[3], "keys": out[4:]}


def _suggest(wb, project_id: int, suggestion, confidence: float) -> None:
    """What a refit writes: a suggestion and its confidence on every unlabelled item."""
    with wb.db.session() as session:
        session.execute(update(LabelItem).where(LabelItem.project_id == project_id, LabelItem.label.is_(None))
                        .values(suggestion=suggestion, confidence=confidence))


def _events(wb, project_id: int) -> list[tuple]:
    with wb.db.session() as session:
        return [(e.action, e.item_id, e.label, e.user) for e in session.scalars(
            select(LabelEvent).where(LabelEvent.project_id == project_id).order_by(LabelEvent.id))]


def test_keys_label_skip_and_undo_with_the_next_item_in_the_answer(wb, tmp_path):
    project = _project(wb, tmp_path)
    view, *out = label_tab.open_project(wb, project["id"], "ann")
    first = _values(tuple(out))
    assert view == {"id": project["id"], "names": ["spam", "ham"], "multi": False, "claimant": None}
    assert "message number 0" in first["text"] and "No suggestion yet" in first["text"]
    assert [k.get("value") for k in first["keys"][:2]] == ["1 · spam", "2 · ham"]
    assert all(k.get("visible") is False for k in first["keys"][2:])
    # A refresh shows the same text (the user's claim comes back); another labeller gets another one.
    assert label_tab.open_project(wb, project["id"], "ann")[2] == first["held"]
    assert label_tab.open_project(wb, project["id"], "bob")[2]["item_id"] != first["held"]["item_id"]
    same = _values(label_tab.accept(wb, view, first["held"], None, "ann"))  # Enter with no suggestion
    assert same["held"] == first["held"] and "No suggestion for this text yet" in same["text"]
    nothing = _values(label_tab.undo(wb, view, "ann"))  # nothing to undo yet: the same text, and why
    assert nothing["held"] == first["held"] and "nothing to undo" in nothing["text"]

    second = _values(label_tab.press_key(wb, view, first["held"], 1, None, "ann"))  # key 2: ham
    assert second["held"]["item_id"] not in (first["held"]["item_id"], None)
    assert f"data-item='{second['held']['item_id']}'" in second["text"]
    third = _values(label_tab.skip(wb, view, second["held"], "ann"))
    back = _values(label_tab.undo(wb, view, "ann"))  # the skip is undone: its item is on screen again
    assert "label-notice" not in back["text"]
    assert back["held"]["item_id"] == second["held"]["item_id"] != third["held"]["item_id"]
    assert label_tab.press_key(wb, view, first["held"], 5, None, "ann") == (gr.skip(),) * 4  # no 6th label
    assert [(a, i, lab, u) for a, i, lab, u in _events(wb, project["id"]) if a in (EVENT_LABEL, EVENT_SKIP)] == [
        (EVENT_LABEL, first["held"]["item_id"], "ham", "ann"), (EVENT_SKIP, second["held"]["item_id"], None, "ann")]


def test_without_sign_in_each_browser_holds_its_own_claims(wb, tmp_path):
    project = _project(wb, tmp_path)
    one = label_tab.open_project(wb, project["id"], "", "browser-a")
    two = label_tab.open_project(wb, project["id"], "", "browser-b")
    assert one[2]["item_id"] != two[2]["item_id"]
    assert label_tab.open_project(wb, project["id"], "", "browser-a")[2] == one[2]  # a refresh: the same text
    after = _values(label_tab.press_key(wb, two[0], two[2], 0, None, ""))
    assert after["held"]["item_id"] not in (one[2]["item_id"], two[2]["item_id"])
    with wb.db.session() as session:
        assert session.get(LabelItem, two[2]["item_id"]).labelled_by == ""
    assert label_tab.new_claimant() != label_tab.new_claimant()


def test_a_text_taken_by_another_labeller_meanwhile_is_reported_and_the_next_one_shown(wb, tmp_path):
    project = _project(wb, tmp_path)
    view, *out = label_tab.open_project(wb, project["id"], "ann")
    held = out[1]
    with wb.db.session() as session:  # ann's lease ran out and bob took the text
        session.execute(update(LabelItem).where(LabelItem.id == held["item_id"]).values(claimed_by="bob"))
    shown = _values(label_tab.press_key(wb, view, held, 0, None, "ann"))
    assert "is being labelled by bob" in shown["text"] and shown["held"]["item_id"] != held["item_id"]


def test_the_suggestion_is_highlighted_and_enter_accepts_it(wb, tmp_path):
    project = _project(wb, tmp_path)
    _suggest(wb, project["id"], "spam", 0.83)
    view, *out = label_tab.open_project(wb, project["id"], "ann")
    shown = _values(tuple(out))
    assert "Suggested: <b>spam</b> · confidence 83%" in shown["text"]
    assert "data-suggested='1'" in shown["text"]  # the page's style lights key 1 (highlight_css)
    assert '[data-suggested~="1"]) #label-key-1' in label_tab.highlight_css()
    after = _values(label_tab.accept(wb, view, shown["held"], None, "ann"))
    assert after["held"]["item_id"] != shown["held"]["item_id"]
    # A label's answer is the text and the item: the pickers of a single-label project are not sent again.
    assert len(after) == 5 and after["keys"] == () and after["ticks"] == after["rest"] == gr.skip()
    with wb.db.session() as session:
        item = session.get(LabelItem, shown["held"]["item_id"])
        assert (item.label, item.labelled_by) == ("spam", "ann")


def test_multi_label_keys_tick_and_enter_saves_the_ticked_labels(wb, tmp_path):
    project = _project(wb, tmp_path, multi=True, labels="billing\nbug\nfeature")
    _suggest(wb, project["id"], ["bug"], 0.7)
    view, *out = label_tab.open_project(wb, project["id"], "ann")
    shown = _values(tuple(out))
    assert shown["ticks"]["visible"] and shown["ticks"]["value"] == ["bug"]
    assert "data-suggested='2'" in shown["text"]
    ticks = label_tab.press_key(wb, view, shown["held"], 0, ["bug"], "ann")[2]
    assert ticks["value"] == ["bug", "billing"]
    assert label_tab.press_key(wb, view, shown["held"], 1, ticks["value"], "ann")[2]["value"] == ["billing"]
    label_tab.accept(wb, view, shown["held"], ["bug", "billing"], "ann")
    with wb.db.session() as session:
        assert session.get(LabelItem, shown["held"]["item_id"]).label == ["billing", "bug"]


def test_a_label_set_over_nine_offers_the_rest_in_a_picker(wb, tmp_path):
    names = [f"c{i}" for i in range(11)]
    project = _project(wb, tmp_path, labels="\n".join(names))
    view, *out = label_tab.open_project(wb, project["id"], "ann")
    shown = _values(tuple(out))
    assert shown["rest"]["visible"] and shown["rest"]["choices"] == ["c9", "c10"]
    assert [k.get("value") for k in shown["keys"]][-1] == "9 · c8"


def test_a_comma_line_or_one_label_a_line_both_make_the_label_set():
    assert label_tab.label_lines("spam, ham") == "spam, ham"
    assert label_tab.label_lines("spam: ads, offers\n\nham\n") == ["spam: ads, offers", "ham"]


def test_progress_is_sent_only_when_it_changed_and_the_curve_has_its_band_and_baseline(wb, tmp_path):
    project = _project(wb, tmp_path)
    view, *out = label_tab.open_project(wb, project["id"], "ann")
    label_tab.press_key(wb, view, out[1], 0, None, "ann")
    status, curve, key, timer = label_tab.progress_values(wb, project["id"], "", 2.0)
    assert "1 / 12 labelled" in status and "spam 1 · ham 0" in status
    assert "Embedding the pool: queued" in status and "The curve starts after the first refit" in curve
    again = label_tab.progress_values(wb, project["id"], key, 2.0)
    assert again[0] is not None and again[2] == key and not isinstance(again[0], str)  # skipped: unchanged
    with wb.db.session() as session:
        for labels, value in ((10, 0.6), (20, 0.7), (30, 0.75)):
            session.add(LabelEstimate(project_id=project["id"], labels=labels, metric="accuracy", estimate=value,
                                      low=value - 0.1, high=value + 0.1, majority=0.55, source="cross-validation (5 folds)",
                                      agreement=0.9))
    status, curve, _, _ = label_tab.progress_values(wb, project["id"], key, 2.0)
    assert "Estimated accuracy <b>0.75</b> (0.65 – 0.85) at 30 labels" in status and "0.55" in status
    assert "class='wb-interval'" in curve and "class='wb-majority'" in curve and curve.count("<circle") == 3


def test_the_page_polls_every_2_s_for_the_embedding_and_every_5_s_while_someone_labels():
    running, queued = {"status": "running"}, {"status": "queued"}
    pace = label_tab.poll_pace
    assert pace({"jobs": {"embed": running, "refit": None}, "labels_per_minute": 12}) == (True, 2.0)
    assert pace({"jobs": {"embed": None, "refit": queued}, "labels_per_minute": 12}) == (True, 5.0)
    assert pace({"jobs": {"embed": None, "refit": running}, "labels_per_minute": 0}) == (True, 2.0)
    assert pace({"jobs": {"embed": {"status": "succeeded"}, "refit": None}, "labels_per_minute": 3}) == (True, 5.0)
    assert pace({"jobs": {}, "labels_per_minute": 0}) == (False, 5.0) and pace(None) == (False, 5.0)


def test_the_learning_curve_draws_a_lone_point_and_a_flat_majority():
    one = plots.learning_curve_svg([{"labels": 10, "estimate": 0.5, "low": 0.3, "high": 0.7, "metric": "macro_f1"}],
                                   majority=0.4)
    assert "macro-f1" in one and "<line class='wb-interval'" in one and "class='wb-majority'" in one
    assert "wb-chart-empty" in plots.learning_curve_svg([{"labels": 10, "estimate": None}])


def test_train_export_and_label_the_rest(wb, tmp_path, monkeypatch):
    project = _project(wb, tmp_path)
    with pytest.raises(Exception, match="label some texts first"):
        label_tab.train(wb, project["id"], "ann")
    view, *out = label_tab.open_project(wb, project["id"], "ann")
    held = out[1]
    for index in (0, 1, 0, 1):
        held = label_tab.press_key(wb, view, held, index, None, "ann")[1]
    message, run_id = label_tab.train(wb, project["id"], "ann")
    assert f"Run **#{run_id}** queued" in message
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "gradio"))
    exported = Path(label_tab.export(wb, project["id"], "jsonl"))
    assert exported.is_relative_to(tmp_path / "gradio") and exported.suffix == ".jsonl"
    rows = [json.loads(line) for line in exported.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 12 and sum(r["labelled_by"] == "ann" for r in rows) == 4
    with pytest.raises(gr.Error, match="finished run"):
        label_tab.predict_rest(wb, project["id"], None)


def test_the_keys_the_script_presses_exist_on_the_tab(wb):
    with gr.Blocks() as demo:
        label_tab.build(wb)
    ids = {block.elem_id for block in demo.blocks.values()}
    pressed = {f"label-key-{i}" for i in range(1, 10)} | {"label-accept", "label-skip", "label-undo", "label-text"}
    assert pressed <= ids
    assert all(f"'{name}'" in label_tab.KEYS_JS for name in ("label-accept", "label-skip", "label-undo",
                                                            "label-text"))


def test_send_to_relabel_from_the_audit_panel_makes_a_project_with_the_suspects_first(wb, tmp_path):
    folder = tmp_path / "audit"
    (folder / "fold-0").mkdir(parents=True)
    records = [{"text": f"review {i}", "label": "pos" if i % 2 else "neg", "_example": f"train:{i}"}
               for i in range(6)]
    (folder / "fold-0" / "heldout.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    rows = [{"rank": 1, "example": "train:3", "text": "review 3", "given": "pos", "suggested": "neg"}]
    (folder / "issues.json").write_text(json.dumps(rows))
    with wb.db.session() as session:
        audit = Audit(name="audit of reviews", task="text-classification", spec={"folds": 1}, folder=str(folder),
                      summary={"issues": 1, "examples": 6, "labels": ["neg", "pos"]})
        session.add(audit)
        session.flush()
        audit_id = audit.id
    assert audit_panel.relabel_targets(wb) == [("a new labelling project", audit_panel.NEW_PROJECT)]
    message, project_id = audit_panel.send_to_relabel(wb, audit_id, audit_panel.NEW_PROJECT, "ann")
    assert f"1 suspicious examples sent to labelling project **{project_id}**" in message
    assert [value for _, value in audit_panel.relabel_targets(wb)] == [audit_panel.NEW_PROJECT, project_id]
    view, *out = label_tab.open_project(wb, project_id, "bob")
    assert "review 3" in out[0] and "sent back to relabel · was pos" in out[0]
    with pytest.raises(gr.Error, match="Pick an audit"):
        audit_panel.send_to_relabel(wb, None, audit_panel.NEW_PROJECT, "ann")
