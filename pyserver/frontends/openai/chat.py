"""Chat messages into one prompt: the model's own chat template when its
folder has one, else a plain default.

A template is looked for, as Hugging Face tokenizers keep it, in the
model's folder, then in its version folders (newest first), then in a
local model directory a vLLM ``model.json`` names (``tokenizer`` or
``model``): ``chat_template.jinja``, else the ``chat_template`` of
``tokenizer_config.json`` (a string, or a list of named templates: the one
named "default"). It is rendered with jinja2 (imported only then: the
``openai`` extra) in a sandbox, as transformers' ``apply_chat_template``
renders it: ``messages``, ``add_generation_prompt``, ``bos_token`` and
``eos_token`` from the same config, ``raise_exception``.

Without a template each message is one ``<role>: <content>`` line and the
prompt ends with ``assistant:``.
"""

from __future__ import annotations

import functools
import json
import os
from datetime import datetime
from pathlib import Path

from pyserver.frontends.openai.errors import OpenAIError, invalid

__all__ = ["ChatTemplate", "default_prompt", "find_template", "load_template"]


def default_prompt(messages: list) -> str:
    lines = [f"{m['role']}: {m.get('content') or ''}" for m in messages]
    lines.append("assistant:")
    return "\n".join(lines)


class ChatTemplate:
    """A model's template and the special tokens it is rendered with."""

    __slots__ = ("source", "where", "bos_token", "eos_token")

    def __init__(self, source: str, where: str, bos_token: str = "", eos_token: str = ""):
        self.source = source
        self.where = where  # the file it came from (for error messages)
        self.bos_token = bos_token
        self.eos_token = eos_token

    def render(self, messages: list, model: str) -> str:
        try:
            import jinja2  # noqa: F401 (the optional dependency, checked here)
        except ImportError:
            raise OpenAIError(500, f"model '{model}' has a chat template ({self.where}) but "
                                   "jinja2 is not installed: pip install 'pyserver[openai]'",
                              type="server_error") from None
        template = _compile(self.source)
        try:
            return template.render(messages=messages, add_generation_prompt=True,
                                   bos_token=self.bos_token, eos_token=self.eos_token,
                                   tools=None, documents=None)
        except _TemplateRefusal as e:  # the template's raise_exception: the chat is wrong
            raise invalid(f"The chat template of model '{model}' refused the messages: {e}",
                          "messages", "invalid_value") from None
        except Exception as e:  # a broken template
            raise OpenAIError(500, f"The chat template of model '{model}' ({self.where}) "
                                   f"failed: {e}", type="server_error") from None


class _TemplateRefusal(Exception):
    pass


def _raise_exception(message):
    raise _TemplateRefusal(message)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # as transformers defines it: no HTML escaping (jinja2's own escapes)
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@functools.lru_cache(maxsize=64)
def _compile(source: str):
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(source)
    except Exception as e:
        raise OpenAIError(500, f"a chat template does not compile: {e}",
                          type="server_error") from None


def _token(value) -> str:
    """A special token as tokenizer_config.json writes it: a string or an
    AddedToken object ({"content": ...})."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else ""


def _from_folder(folder: Path) -> ChatTemplate | None:
    config_file = folder / "tokenizer_config.json"
    config = {}
    if config_file.is_file():
        try:
            config = json.loads(config_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            config = {}
        if not isinstance(config, dict):
            config = {}
    bos, eos = _token(config.get("bos_token")), _token(config.get("eos_token"))
    jinja_file = folder / "chat_template.jinja"
    if jinja_file.is_file():
        return ChatTemplate(jinja_file.read_text(encoding="utf-8"), str(jinja_file), bos, eos)
    source = config.get("chat_template")
    if isinstance(source, list):  # named templates: the default one
        named = {t.get("name"): t.get("template") for t in source if isinstance(t, dict)}
        source = named.get("default")
    if isinstance(source, str) and source:
        return ChatTemplate(source, str(config_file), bos, eos)
    return None


def _folders(model_dir: Path) -> list[Path]:
    """Where a template may be, in the order looked at."""
    folders = [model_dir]
    versions = sorted((p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()),
                      key=lambda p: int(p.name), reverse=True)
    folders.extend(versions)
    for version in versions:  # a vLLM model.json naming a local model directory
        spec = version / "model.json"
        if not spec.is_file():
            continue
        try:
            doc = json.loads(spec.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        for key in ("tokenizer", "model"):
            path = doc.get(key) if isinstance(doc, dict) else None
            if isinstance(path, str) and path:
                local = Path(path) if os.path.isabs(path) else version / path
                if local.is_dir():
                    folders.append(local)
    return folders


def find_template(model_dir: Path | None) -> ChatTemplate | None:
    """The chat template of the model in ``model_dir``, None without one."""
    if model_dir is None or not model_dir.is_dir():
        return None
    for folder in _folders(model_dir):
        found = _from_folder(folder)
        if found is not None:
            return found
    return None


def load_template(path: str) -> ChatTemplate:
    """A template file given on the command line (a .jinja file, or a
    tokenizer_config.json)."""
    p = Path(path)
    if p.name == "tokenizer_config.json" or p.is_dir():
        found = _from_folder(p.parent if p.is_file() else p)
        if found is None:
            raise ValueError(f"{path}: no chat template in it")
        return found
    return ChatTemplate(p.read_text(encoding="utf-8"), str(p))
