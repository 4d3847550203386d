"""Model-family adapters. Each module of this package defines and registers one adapter, except the support
modules in :data:`SUPPORT_MODULES` (the base classes and the refusals table). A family with modules of its own (a
composed family's model and processor) is a package: its adapter in its ``__init__``, the rest beside it.

Which adapter serves a checkpoint, in order (:func:`get_adapter`): the one the user named (``--adapter``:
a registered name or ``package.module:Class``), else the registered adapter whose ``model_types`` has the
checkpoint's ``config.model_type`` (built-in, or from an installed plugin's ``vrh.adapters`` entry point),
else a refusal with its reason (:mod:`vrh.models.adapters.refusals`), else an error listing the supported types.
docs/adapters.md shows how to write and register a custom adapter.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from vrh.models.adapters import base as _base
from vrh.models.adapters.base import Adapter, VisionBatch, register_adapter
from vrh.models.adapters.refusals import (REFUSALS, find_refusal, native_in_transformers,
                                   remote_code_message)

SUPPORT_MODULES = ("base", "composed_base", "refusals")  # modules of this package that define no adapter
PLUGIN_GROUP = "vrh.adapters"  # entry-point group: name = "package.module:AdapterClass"
NOT_STATED = "(not stated)"
STATUSES = ("tested", "composed", "custom", "refused")  # vrh models' order (describe_adapter says what each means)


def registered_adapters() -> dict[str, type[Adapter]]:
    """Every registered adapter by name (:func:`vrh.models.adapters.base.registered_adapters`)."""
    return _base.registered_adapters()


for _mod in pkgutil.iter_modules(__path__):  # a family is a module or a package (its adapter in its __init__)
    if _mod.name not in SUPPORT_MODULES:
        importlib.import_module(f"{__name__}.{_mod.name}")


def load_plugins() -> list[type[Adapter]]:
    """Register the adapters installed packages declare under the ``vrh.adapters`` entry-point group
    (``[project.entry-points."vrh.adapters"] my_family = "mypkg.mymodule:MyAdapter"``) and return them.
    Called on lookup, not at import, so importing vrh runs no third-party code."""
    from importlib.metadata import entry_points

    found = []
    for ep in entry_points(group=PLUGIN_GROUP):
        cls = ep.load()
        if not (isinstance(cls, type) and issubclass(cls, Adapter)):
            raise ValueError(f"entry point {ep.name!r} = {ep.value!r} in group {PLUGIN_GROUP!r} is not a "
                             "vrh.models.adapters.Adapter subclass")
        found.append(register_adapter(cls))
    return found


def adapter_class(spec: str) -> type[Adapter]:
    """The adapter class ``spec`` names: a registered adapter name, ``package.module:Class`` (imported from
    ``sys.path``) or ``path/to/file.py:Class``. A custom class needs no registration.

    Why a file path too: the ``vrh`` console script does not put the working directory on ``sys.path``,
    so a user's ``my_adapter.py`` next to their data would not import by module name."""
    module, colon, attr = spec.rpartition(":")
    if not colon:
        load_plugins()
        if spec in registered_adapters():
            return registered_adapters()[spec]
        raise ValueError(f"--adapter {spec!r}: no registered adapter of that name (registered: "
                         f"{sorted(registered_adapters())}); a custom adapter is written 'package.module:Class' "
                         "or 'path/to/file.py:Class'")
    try:
        obj: Any = _import_file(module) if module.endswith(".py") else importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"--adapter {spec!r}: cannot import it ({e})") from e
    if not (isinstance(obj, type) and issubclass(obj, Adapter)):
        raise ValueError(f"--adapter {spec!r} is not a vrh.models.adapters.Adapter subclass")
    return obj


def _import_file(path: str) -> Any:
    """The module in the Python file ``path`` (imported once per path; a missing file is an ImportError)."""
    import hashlib
    import importlib.util
    import sys
    from pathlib import Path

    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise ImportError(f"no file {file}")
    name = f"vrh_custom_adapter_{file.stem}_{hashlib.sha1(str(file).encode()).hexdigest()[:8]}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, file)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # before exec: dataclasses and pickling look the module up by name
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]


def get_adapter(model_type_or_name: str, *, adapter: str | None = None) -> Adapter:
    """The adapter for a ``config.model_type`` (or an adapter name); with ``adapter`` (a registered name or
    ``package.module:Class``), that one, checked against the model type when it declares its types.

    Raises ValueError with one line saying why when no adapter serves the type: a refused family names its
    reason and remedy; an unknown type lists the supported ones.
    """
    if adapter:
        cls = adapter_class(adapter)
        if cls.model_types and model_type_or_name not in (cls.name, *cls.model_types):
            raise ValueError(f"--adapter {adapter!r} serves model types {list(cls.model_types)}, not "
                             f"{model_type_or_name!r}; add it to {cls.__name__}.model_types if it fits")
        return cls()
    if not model_type_or_name:
        raise ValueError("the checkpoint's config.json states no model_type; vrh picks the adapter by it")
    cls = _serving(model_type_or_name) or (load_plugins() and _serving(model_type_or_name))  # plugins if needed
    if cls:
        return cls()
    refusal = find_refusal(model_type_or_name)
    if refusal is not None:
        raise ValueError(refusal.message(model_type_or_name))
    if not native_in_transformers(model_type_or_name):
        raise ValueError(remote_code_message(model_type_or_name))
    known = sorted(t for c in registered_adapters().values() for t in c.model_types)
    refused = sorted(t for r in REFUSALS for t in r.model_types)
    raise ValueError(f"no vrh adapter for model type {model_type_or_name!r}; supported: {known} (refused: "
                     f"{refused}); a custom adapter can serve it (docs/adapters.md, --adapter)")


def _serving(model_type_or_name: str) -> type[Adapter] | None:
    return next((c for c in registered_adapters().values()
                 if model_type_or_name == c.name or model_type_or_name in c.model_types), None)


def describe_adapter(cls: type[Adapter]) -> dict[str, Any]:
    """What ``vrh models`` shows for one adapter class. ``box_convention`` (how answers write a box:
    coordinates and format) and ``token_layout`` (visual tokens -> image, one line) are class attributes an
    adapter may set; missing ones read "(not stated)". Built-in adapters are "tested" because the shared
    suite (tests/models/adapters) refuses a registered adapter without a tiny random-init build; a built-in
    family vrh composes itself (:class:`~vrh.models.adapters.composed_base.ComposedAdapter`, no transformers class) is
    "composed", its detail saying what the CPU tests verified, what needs a GPU with the real weights and which
    published files vrh saw only in part. ``answer_formats``: the names of the family's prompt/answer variants,
    its default first (:func:`vrh.models.answer_formats.declared`)."""
    from vrh.models.adapters.composed_base import ComposedAdapter
    from vrh.models.answer_formats import declared

    builtin = cls.__module__.startswith(__name__ + ".")
    composed = builtin and issubclass(cls, ComposedAdapter)
    detail = "tiny random-init instance, shared adapter suite" if builtin else "not tested by vrh"
    checks = {}
    if composed:
        checks = {"verified_on_cpu": cls.verified_on_cpu, "needs_gpu": cls.needs_gpu, "config_gaps": cls.config_gaps}
        detail = (f"verified on CPU: {cls.verified_on_cpu}; needs a GPU with the real weights: {cls.needs_gpu}"
                  + (f"; published files seen only in part: {cls.config_gaps}" if cls.config_gaps else ""))
    return {"name": cls.name or cls.__name__, "model_types": list(cls.model_types),
            "status": "composed" if composed else "tested" if builtin else "custom",
            "status_detail": detail, **checks, "source": f"{cls.__module__}:{cls.__qualname__}",
            "box_convention": getattr(cls, "box_convention", None) or NOT_STATED,
            "token_layout": getattr(cls, "token_layout", None) or NOT_STATED,
            "answer_formats": [f.name for f in declared(cls)]}


def list_families(extra: tuple[type[Adapter], ...] = ()) -> list[dict[str, Any]]:
    """Every registered adapter (built-in and plugin, plus ``extra``) and every refused family, as
    :func:`describe_adapter` rows; refused rows carry ``reason`` and ``remedy``."""
    load_plugins()
    classes = list(registered_adapters().values()) + [c for c in extra if c not in registered_adapters().values()]
    rows = sorted((describe_adapter(c) for c in classes), key=lambda r: (STATUSES.index(r["status"]), r["name"]))
    served = {t for r in rows for t in r["model_types"]}
    for ref in REFUSALS:
        if served.isdisjoint(ref.model_types):  # a plugin serving a refused family wins over the refusal
            rows.append({"name": ref.name, "model_types": list(ref.model_types), "status": "refused",
                         "status_detail": ref.kind, "source": None, "box_convention": ref.box_convention,
                         "token_layout": ref.token_layout, "answer_formats": [], "reason": ref.reason,
                         "remedy": ref.remedy})
    return rows


__all__ = ["Adapter", "VisionBatch", "adapter_class", "describe_adapter", "get_adapter", "list_families",
           "load_plugins", "register_adapter", "registered_adapters"]
