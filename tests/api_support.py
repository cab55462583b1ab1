"""Helpers of the REST API's tests: an app with only the API's router, a world of work owned by two editors, the
actors as requests send them (session cookies and tokens), and a dump of every table."""
from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any, Iterator, Optional

from sqlalchemy import inspect, text

from storage.models import KIND_PREDICT, QUEUED, SUCCEEDED, Artifact, Dataset, Run
from workbench.services import accounts, audits, labelling, sweeps
from workbench.services.access import Actor

ACTORS = ("anonymous", "viewer", "editor_own", "editor_other", "admin", "read_token", "write_token",
          "revoked_token", "expired_token")


def api_app(wb):
    """A FastAPI app with only the REST API (and the server's settings: no docs of FastAPI's own)."""
    from fastapi import FastAPI

    from workbench.api import mount_api

    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    mount_api(app, wb)
    return app


def flat_routes(routes) -> Iterator[Any]:
    """The routes of an app, those of included routers too."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            yield from flat_routes(inner.routes)
        else:
            yield route


def csv_text(rows: int = 24, extra: str = "") -> str:
    lines = ["text,label"] + [f"{'great film loved it' if i % 2 else 'awful boring film'} {i} {extra},"
                              f"{'pos' if i % 2 else 'neg'}" for i in range(rows)]
    return "\n".join(lines) + "\n"


class World:
    """Work owned by the editor ("own") and the other editor ("other"), made fresh for each call that may change
    it, in ``wb``'s database (rows written straight where a service would train or read models)."""

    def __init__(self, wb, team):
        self.wb, self.team = wb, team
        self.folder = wb.settings.home / "api-test"
        self.folder.mkdir(parents=True, exist_ok=True)
        source = self.folder / "reviews.csv"
        source.write_text(csv_text(), encoding="utf-8")
        from workbench.services import datasets

        self.base_dataset = datasets.import_dataset(wb, source, "text-classification", name="reviews",
                                                    owner_id=team.editor.user_id).id
        self.shared_run = self.run("own")
        self.shared_job = self.job("own")

    def owner(self, whose: str) -> Actor:
        return self.team.editor if whose == "own" else self.team.other_editor

    def dataset(self, whose: str) -> str:
        id_ = uuid.uuid4().hex[:12]
        folder = self.wb.settings.datasets_dir / id_
        folder.mkdir(parents=True)
        (folder / "train.jsonl").write_text(json.dumps({"text": "fine", "label": "pos"}) + "\n")
        with self.wb.db.session() as session:
            session.add(Dataset(id=id_, owner_id=self.owner(whose).user_id, name=f"set {id_}",
                                task="text-classification", format="csv", content_hash=uuid.uuid4().hex,
                                path=str(folder), num_train=1, num_validation=0, labels={"pos": 1}, stats={},
                                warnings=[]))
        return id_

    def run(self, whose: str, status: str = SUCCEEDED) -> int:
        with self.wb.db.session() as session:
            run = Run(name="tiny", task="text-classification", model="fake:succeed", status=status,
                      spec={"task": "text-classification", "data": {"dataset_id": self.base_dataset}},
                      metrics={"accuracy": 0.75}, owner_id=self.owner(whose).user_id, dataset_id=self.base_dataset)
            session.add(run)
            session.flush()
            run_id = run.id
            output = self.wb.settings.runs_dir / str(run_id)
            (output / "model").mkdir(parents=True, exist_ok=True)
            (output / "model" / "config.json").write_text("{}")
            run.output_dir = str(output)
        return run_id

    def job(self, whose: str) -> int:
        parent = self.run(whose)
        with self.wb.db.session() as session:
            job = Run(name="predict x.csv", kind=KIND_PREDICT, task="text-classification", model="fake:succeed",
                      status=SUCCEEDED, spec={"run_id": parent, "input_name": "x.csv"}, parent_run_id=parent,
                      owner_id=self.owner(whose).user_id)
            session.add(job)
            session.flush()
            output = self.wb.settings.runs_dir / str(job.id)
            output.mkdir(parents=True)
            (output / "predictions.csv").write_text("text,prediction\nfine,pos\n")
            job.output_dir = str(output)
            session.add(Artifact(run_id=job.id, kind="predictions", path=str(output / "predictions.csv"),
                                 size_bytes=25))
            return job.id

    def queued_run(self, whose: str) -> int:
        return self.run(whose, QUEUED)

    def sweep(self, whose: str) -> int:
        from workbench.services.specs import SweepSpec

        spec = SweepSpec.from_dict({"base": {"task": "text-classification", "model": "fake:succeed",
                                             "data": {"dataset_id": self.base_dataset}},
                                    "space": {"learning_rate": {"low": 1e-5, "high": 1e-4, "log": True}},
                                    "n_trials": 2, "parallelism": 1})
        return sweeps.create_sweep(self.wb, spec, owner_id=self.owner(whose).user_id)

    def audit(self, whose: str) -> int:
        return audits.create_audit(self.wb, self.base_dataset, folds=2, model="fake:succeed",
                                   owner_id=self.owner(whose).user_id)

    def playground(self, whose: str) -> str:
        from workbench.playground import service

        return service.publish(self.wb, self.run(whose), owner_id=self.owner(whose).user_id).slug

    def project(self, whose: str) -> int:
        path = self.folder / f"pool-{uuid.uuid4().hex[:6]}.csv"
        path.write_text("text\n" + "".join(f"text number {i}\n" for i in range(6)), encoding="utf-8")
        owner = self.owner(whose)
        return labelling.create_project(self.wb, path, "pos,neg", user=owner.name, owner_id=owner.user_id)["id"]

    def labelled_project(self, whose: str) -> int:
        """A project of ``whose`` with two labels given (enough to train from)."""
        project, user = self.project(whose), self.owner(whose).name
        for label in ("pos", "neg"):
            item = labelling.next_item(self.wb, project, user)
            labelling.give_label(self.wb, project, item["item_id"], label, user)
        return project

    def claimed_item(self, whose: str, claimant: Optional[str]) -> tuple[int, int]:
        """A project of ``whose`` and an item claimed by ``claimant`` (as the API's next would)."""
        project = self.project(whose)
        if claimant is None:
            return project, 1
        item = labelling.next_item(self.wb, project, claimant, claimant=claimant)
        return project, item["item_id"]


def actor_headers(wb, team, who: str) -> dict[str, str]:
    """The headers a request of ``who`` (one of ACTORS) carries."""
    if who == "anonymous":
        return {}
    tokens = {"read_token": team.read_token, "write_token": team.write_token, "revoked_token": team.revoked_token,
              "expired_token": team.expired_token}
    if who in tokens:
        return {"Authorization": f"Bearer {tokens[who]}"}
    person = {"viewer": team.viewer, "editor_own": team.editor, "editor_other": team.editor,
              "admin": team.admin}[who]
    return {"Cookie": f"workbench_session={accounts.start_session(wb, person)}"}


# What a token's use touches even on a refused call (its use is logged, at most once a minute a token).
def dump(wb) -> dict[str, list]:
    """Every row of every table (the token's own bookkeeping left out: ``api_tokens.last_used_at`` and the
    activity log's ``token_use`` rows)."""
    out = {}
    with wb.db.engine.connect() as conn:
        for table in sorted(inspect(conn).get_table_names()):
            rows = conn.execute(text(f'SELECT * FROM "{table}"')).mappings().all()
            kept = []
            for row in rows:
                row = dict(row)
                if table == "api_tokens":
                    row.pop("last_used_at", None)
                if table == "activity" and row.get("action") == "token_use":
                    continue
                kept.append(sorted((k, repr(v)) for k, v in row.items()))
            out[table] = sorted(kept)
    return out


def tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))
