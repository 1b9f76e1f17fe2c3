"""The server's memory routes (`GET/POST /memory`, `DELETE /memory/{id}`), over HTTP."""

from __future__ import annotations

from pathlib import Path

import requests

from .conftest import Served


def test_notes_over_http(server: Served) -> None:
    directory = str(server.workspace)
    made = requests.post(
        server.url + "/memory", json={"text": "use the staging db", "directory": directory}, timeout=30
    )
    assert made.status_code == 201
    note = made.json()
    assert note["id"].startswith("mem_") and note["by"] == "user" and note["project"] == str(Path(directory).resolve())
    user = requests.post(server.url + "/memory", json={"text": "answer briefly", "scope": "user"}, timeout=30)
    assert user.status_code == 201
    listed = requests.get(server.url + "/memory", params={"directory": directory}, timeout=30).json()["notes"]
    assert [n["text"] for n in listed] == ["answer briefly", "use the staging db"]
    gone = requests.delete(server.url + f"/memory/{note['id']}", params={"directory": directory}, timeout=30)
    assert gone.status_code == 200 and gone.json()["id"] == note["id"]
    again = requests.delete(server.url + f"/memory/{note['id']}", params={"directory": directory}, timeout=30)
    assert again.status_code == 404
    bad = requests.post(server.url + "/memory", json={"text": "no project"}, timeout=30)
    assert bad.status_code == 400 and "directory" in bad.text
