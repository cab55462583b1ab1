"""`workbench publish|unpublish|playgrounds|playground-runtime`: share a finished run as a playground page and
API, served by PyTorch or by an exported ONNX variant."""
from __future__ import annotations

from typing import Optional

import typer

from storage.context import open_workbench
from storage.settings import Settings
from workbench.cli import app, emit, id_argument
from workbench.playground import service
from workbench.services import runs as runs_service


def _base_url(settings: Settings, host: Optional[str] = None, port: Optional[int] = None) -> str:
    host = host or settings.host
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    return f"http://{shown}:{port or settings.port}"


@app.command()
def publish(
    run_id: int = id_argument("run", "The succeeded run to publish."),
    token: Optional[str] = typer.Option(None, help="Access token the playground will require (8+ characters)."),
    generate_token: bool = typer.Option(False, "--generate-token", help="Make up a random access token."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (slug, url_path, api_path, token once)."),
    runtime: str = typer.Option("pytorch", "--runtime", help="What answers: pytorch, or an ONNX variant of the "
                                                            "run's newest export (onnx-fp32, onnx-int8, onnx-fp16)."),
    standalone: bool = typer.Option(False, "--standalone",
                                    help="Serve only this playground from this process (no workbench)."),
    host: Optional[str] = typer.Option(None, help="With --standalone: interface (default WORKBENCH_HOST)."),
    port: Optional[int] = typer.Option(None, help="With --standalone: port (default WORKBENCH_PORT)."),
    share: bool = typer.Option(False, "--share", help="With --standalone: ask Gradio for a public link (needs "
                                                      "internet; offline it says so and serves locally)."),
) -> None:
    """Publish a succeeded run at /play/<slug>/ on the workbench server; the token is shown only now."""
    if share and not standalone:
        raise typer.BadParameter("--share needs --standalone (the workbench server itself is never shared)")
    if generate_token and token:
        raise typer.BadParameter("give --token or --generate-token, not both")
    with open_workbench(Settings.from_env(host=host, port=port) if standalone else None) as wb:
        info = service.publish(wb, run_id, token=service.new_token() if generate_token else token, runtime=runtime)
        base = _base_url(wb.settings)
        link = f"{base}{info.url_path}" + (f"?token={info.token}" if info.token else "")
        payload = {**info.to_dict(), "url": link}
        lines = [f"published run {run_id} as {info.slug}", f"page: {link}", f"API:  POST {base}{info.api_path}",
                 f"served by: {info.runtime}"]
        if info.token:
            lines.append(f"token: {info.token}  (shown once; only its hash is stored)")
        warning = runs_service.learned_warning(wb, run_id)
        if warning:
            typer.echo(f"warning: run {run_id} {warning}", err=True)
            payload["warning"] = warning
        emit(payload, as_json, "\n".join(lines))
        if standalone:
            from workbench.playground.standalone import serve_standalone

            serve_standalone(wb, info.slug, wb.settings.host, wb.settings.port, share,
                             say=lambda line: typer.echo(line, err=as_json))


@app.command()
def unpublish(slug: str, as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Take a playground down: its page and API answer 404 from now on."""
    with open_workbench() as wb:
        info = service.unpublish(wb, slug)
    emit(info.to_dict(), as_json, f"unpublished {slug}")


@app.command("playground-runtime")
def playground_runtime(
    slug: str,
    runtime: str = typer.Argument(..., help="pytorch, onnx-fp32, onnx-int8 or onnx-fp16 (the variant must be in "
                                            "the run's newest export)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Serve a playground from another runtime; a running server answers with it from the next request."""
    with open_workbench() as wb:
        info = service.set_runtime(wb, slug, runtime)
    emit(info.to_dict(), as_json, f"{slug} is now served by {info.runtime}")


@app.command()
def playgrounds(
    as_json: bool = typer.Option(False, "--json", help="Print JSON (a list)."),
    all_: bool = typer.Option(False, "--all", help="Include unpublished playgrounds."),
) -> None:
    """List published playgrounds, newest first."""
    with open_workbench() as wb:
        rows = service.list_playgrounds(wb, include_inactive=all_)
        base = _base_url(wb.settings)
    text = "\n".join(f"{p.slug:<48} run {p.run_id:<5} {p.task:<22} {'token' if p.has_token else 'public':<7}"
                     f"{p.runtime:<10} {'' if p.active else 'unpublished  '}{base}{p.url_path}"
                     for p in rows) or "no playgrounds"
    emit([p.to_dict() for p in rows], as_json, text)
