"""``/api/v1/openapi.json`` and ``/api/v1/docs``: the OpenAPI document of the API's own routes, and a page that
reads it and lists every route, its parameters and its schemas. The page is one self-contained file (no CDN,
no external asset: the workbench often runs without internet); both need a signed-in browser or a token."""
from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, JSONResponse

from workbench.api import schemas
from workbench.api.routing import PREFIX, Api

TITLE = "BERT Workbench REST API"
VERSION = "1"
DESCRIPTION = ("Every flow of the workbench: datasets, runs, prediction and evaluation jobs, comparisons, sweeps, "
               "audits, playgrounds and labelling projects. Authenticate with `Authorization: Bearer <token>` "
               "(`workbench tokens create`) or a signed-in browser's session. Errors are JSON: "
               '`{"error": message, "status": code}`. Predicting through a playground is '
               "`POST /api/v1/predict/{slug}` with that playground's own token. Guide: docs/api.md.")


def openapi_document(api: Api) -> dict[str, Any]:
    document = get_openapi(title=TITLE, version=VERSION, description=DESCRIPTION, routes=api.router.routes)
    components = document.setdefault("components", {})
    components.setdefault("schemas", {})["Error"] = schemas.ERROR
    components["securitySchemes"] = {
        "bearer": {"type": "http", "scheme": "bearer", "description": "an API token (wbt_...)"},
        "session": {"type": "apiKey", "in": "cookie", "name": "workbench_session",
                    "description": "the session of a browser signed in to the workbench"}}
    document["security"] = [{"bearer": []}, {"session": []}]
    return document


def add_routes(api: Api) -> None:
    cached: dict[str, Any] = {}

    @api.route("GET", "/openapi.json", "read", summary="This API's OpenAPI document", tag="docs",
               include_in_schema=False)
    async def openapi(request: Request) -> JSONResponse:
        if "document" not in cached:
            cached["document"] = openapi_document(api)
        return JSONResponse(cached["document"])

    @api.route("GET", "/docs", "read", summary="The API's docs page (works offline)", tag="docs",
               include_in_schema=False)
    async def docs(request: Request) -> HTMLResponse:
        return HTMLResponse(PAGE, headers={"Content-Security-Policy": "default-src 'self'; script-src 'unsafe-inline'"
                                                                      " 'self'; style-src 'unsafe-inline'"})


# One page, nothing loaded from anywhere but this server: it fetches openapi.json beside it and lists the routes.
PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>BERT Workbench REST API</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:15px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1000px;padding:1rem 1.5rem;color:#222}
h1{font-size:1.5rem}h2{border-bottom:1px solid #ddd;margin-top:2rem;text-transform:capitalize}
details{border:1px solid #ddd;border-radius:6px;margin:.4rem 0;padding:.3rem .6rem}
summary{cursor:pointer}code,pre{font-family:ui-monospace,monospace;font-size:13px}
pre{background:#f6f6f6;padding:.5rem;overflow:auto;border-radius:4px}
.m{display:inline-block;min-width:4.2rem;font-weight:600;font-family:ui-monospace,monospace}
.GET{color:#0a6}.POST{color:#06c}.DELETE{color:#c22}.PUT,.PATCH{color:#a60}
table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:.2rem .5rem;text-align:left;vertical-align:top}
.muted{color:#666}
</style></head><body>
<h1>BERT Workbench REST API</h1>
<p id="intro" class="muted">Reading <code>openapi.json</code>&hellip;</p>
<div id="routes"></div>
<script>
"use strict";
function esc(s){return String(s).replace(/[&<>"']/g,function(c){return {"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;","'":"&#39;"}[c];});}
function show(v){return "<pre>"+esc(JSON.stringify(v,null,2))+"</pre>";}
function render(doc){
  document.getElementById("intro").innerHTML=esc(doc.info.description||"")+
    ' <a href="openapi.json">openapi.json</a> (OpenAPI '+esc(doc.openapi)+")";
  var groups={};
  Object.keys(doc.paths).forEach(function(path){
    var item=doc.paths[path];
    Object.keys(item).forEach(function(method){
      var op=item[method];var tag=(op.tags||["other"])[0];
      (groups[tag]=groups[tag]||[]).push({path:path,method:method.toUpperCase(),op:op});
    });
  });
  var html="";
  Object.keys(groups).forEach(function(tag){
    html+="<h2>"+esc(tag)+"</h2>";
    groups[tag].forEach(function(r){
      var op=r.op;
      html+='<details><summary><span class="m '+esc(r.method)+'">'+esc(r.method)+"</span> <code>"+esc(r.path)+
        "</code> &mdash; "+esc(op.summary||"")+"</summary>";
      if(op.description){html+="<p>"+esc(op.description)+"</p>";}
      if(op.parameters&&op.parameters.length){
        html+="<p><b>Parameters</b></p><table><tr><th>name</th><th>in</th><th>required</th><th>schema</th></tr>";
        op.parameters.forEach(function(p){
          html+="<tr><td><code>"+esc(p.name)+"</code></td><td>"+esc(p["in"])+"</td><td>"+(p.required?"yes":"no")+
            "</td><td><code>"+esc(JSON.stringify(p.schema||{}))+"</code></td></tr>";
        });
        html+="</table>";
      }
      if(op.requestBody){
        Object.keys(op.requestBody.content||{}).forEach(function(type){
          var media=op.requestBody.content[type];
          html+="<p><b>Body</b> <code>"+esc(type)+"</code> "+esc(op.requestBody.description||"")+"</p>"+show(media.schema);
          if(media.example){html+="<p>Example</p>"+show(media.example);}
        });
      }
      html+="<p><b>Responses</b></p><table>";
      Object.keys(op.responses||{}).forEach(function(code){
        html+="<tr><td>"+esc(code)+"</td><td>"+esc(op.responses[code].description||"")+"</td></tr>";
      });
      html+="</table></details>";
    });
  });
  if(doc.components&&doc.components.schemas){
    html+="<h2>Schemas</h2>";
    Object.keys(doc.components.schemas).forEach(function(name){
      html+="<details><summary><code>"+esc(name)+"</code></summary>"+show(doc.components.schemas[name])+"</details>";
    });
  }
  document.getElementById("routes").innerHTML=html;
}
fetch("openapi.json",{credentials:"same-origin"}).then(function(r){
  if(!r.ok){return r.json().then(function(e){throw new Error(e.error||r.statusText);});}
  return r.json();
}).then(render).catch(function(e){
  document.getElementById("intro").textContent="Could not read openapi.json: "+e.message;
});
</script></body></html>
"""
