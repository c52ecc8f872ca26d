"""template.yaml as the local run reads it: functions, their environment, their event sources.

Only what running the functions locally needs: CodeUri + Handler, the environment the
template gives each function (Globals merged with the function's own, intrinsics resolved
to parameter defaults and local resource names), and stream FilterCriteria.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "template.yaml"
LAYER = ROOT / "layers" / "core"


class _CloudFormationLoader(yaml.SafeLoader):
    """SafeLoader that reads CloudFormation short-form tags (!Ref, !GetAtt, !Sub, ...)."""


def _intrinsic(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    name = "Ref" if suffix == "Ref" else f"Fn::{suffix}"
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
        if suffix == "GetAtt":
            value = str(value).split(".", 1)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
    return {name: value}


_CloudFormationLoader.add_multi_constructor("!", _intrinsic)


def load_template(path: Path = TEMPLATE) -> dict[str, Any]:
    with path.open(encoding="utf-8") as handle:
        # A SafeLoader subclass: only plain data and the intrinsic tags are constructed.
        loaded = yaml.load(handle, Loader=_CloudFormationLoader)  # nosec B506 # a SafeLoader subclass: plain data and intrinsic tags only
    if not isinstance(loaded, dict):
        raise ValueError(f"{path} is not a template")
    return loaded


@dataclass(frozen=True)
class FunctionSpec:
    logical_id: str
    code_uri: Path
    handler: str
    environment: dict[str, str]
    properties: dict[str, Any]

    @property
    def module_path(self) -> Path:
        module, _, _ = self.handler.rpartition(".")
        return self.code_uri / (module.replace(".", "/") + ".py")

    @property
    def function_name(self) -> str:
        return self.handler.rpartition(".")[2]


class Template:
    def __init__(
        self, body: dict[str, Any], resource_names: Mapping[str, str] | None = None
    ) -> None:
        self.body = body
        # Local names for resources the functions refer to (the table, above all).
        self.resource_names = dict(resource_names or {})

    @classmethod
    def load(cls, resource_names: Mapping[str, str] | None = None) -> Template:
        return cls(load_template(), resource_names)

    @property
    def resources(self) -> dict[str, Any]:
        resources: dict[str, Any] = self.body.get("Resources", {})
        return resources

    def parameter_defaults(self) -> dict[str, str]:
        return {
            name: str(spec.get("Default", ""))
            for name, spec in self.body.get("Parameters", {}).items()
        }

    def resolve(self, value: Any, parameters: Mapping[str, str]) -> str:
        """An environment value with its intrinsics resolved for a local run."""
        if isinstance(value, str | int | float):
            return str(value)
        if isinstance(value, dict) and "Ref" in value:
            name = str(value["Ref"])
            if name in parameters:
                return parameters[name]
            if name.startswith("AWS::"):
                return {"AWS::Region": "us-east-1", "AWS::AccountId": "123456789012"}.get(
                    name, "local"
                )
            return self.resource_names.get(name, name)
        if isinstance(value, dict) and "Fn::Sub" in value:
            text = value["Fn::Sub"] if isinstance(value["Fn::Sub"], str) else value["Fn::Sub"][0]
            for name, param in {**parameters, **self.resource_names}.items():
                text = text.replace("${" + name + "}", param)
            return text
        if isinstance(value, dict) and "Fn::GetAtt" in value:
            resource, attribute = value["Fn::GetAtt"]
            return f"{self.resource_names.get(resource, resource)}.{attribute}"
        if isinstance(value, dict) and "Fn::If" in value:
            _condition, when_true, _when_false = value["Fn::If"]
            return self.resolve(when_true, parameters)
        raise ValueError(f"cannot resolve {value!r} locally")

    def function(
        self, logical_id: str, parameters: Mapping[str, str] | None = None
    ) -> FunctionSpec:
        resource = self.resources[logical_id]
        if resource.get("Type") != "AWS::Serverless::Function":
            raise ValueError(f"{logical_id} is not a function")
        globals_ = self.body.get("Globals", {}).get("Function", {})
        properties = {**globals_, **resource.get("Properties", {})}
        params = {**self.parameter_defaults(), **(parameters or {})}
        variables = {
            **globals_.get("Environment", {}).get("Variables", {}),
            **resource.get("Properties", {}).get("Environment", {}).get("Variables", {}),
        }
        environment = {name: self.resolve(v, params) for name, v in variables.items()}
        return FunctionSpec(
            logical_id=logical_id,
            code_uri=(ROOT / properties["CodeUri"]).resolve(),
            handler=properties["Handler"],
            environment=environment,
            properties=properties,
        )

    def function_ids(self) -> list[str]:
        return [
            k for k, v in self.resources.items() if v.get("Type") == "AWS::Serverless::Function"
        ]

    def stream_source(self, logical_id: str) -> dict[str, Any]:
        """The properties of the function's DynamoDB stream event source."""
        for event in self.resources[logical_id].get("Properties", {}).get("Events", {}).values():
            if event.get("Type") == "DynamoDB":
                return dict(event["Properties"])
        raise ValueError(f"{logical_id} has no DynamoDB event source")

    def stream_filters(self, logical_id: str) -> list[dict[str, Any]]:
        criteria = self.stream_source(logical_id).get("FilterCriteria", {})
        return [json.loads(f["Pattern"]) for f in criteria.get("Filters", [])]


def load_handler(spec: FunctionSpec) -> Callable[[Any, Any], Any]:
    """Import a function's handler from its CodeUri, the layer on the path, as Lambda would."""
    if str(LAYER) not in sys.path:
        sys.path.insert(0, str(LAYER))
    module_name = f"_local_{spec.logical_id}"
    sys.modules.pop(module_name, None)
    loader_spec = importlib.util.spec_from_file_location(module_name, spec.module_path)
    if loader_spec is None or loader_spec.loader is None:
        raise ImportError(f"cannot load {spec.module_path}")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[module_name] = module
    loader_spec.loader.exec_module(module)
    return getattr(module, spec.function_name)  # type: ignore[no-any-return]


def matches(pattern: Any, event: Any) -> bool:
    """Lambda event-filter matching for the pattern forms the template uses.

    A pattern is a dict of keys to either nested patterns or lists of allowed values;
    an allowed value is a literal or `{"prefix": "..."}`. Every key must match.
    """
    if isinstance(pattern, dict):
        if not isinstance(event, dict):
            return False
        return all(key in event and matches(sub, event[key]) for key, sub in pattern.items())
    if isinstance(pattern, list):
        return any(_value_matches(allowed, event) for allowed in pattern)
    return bool(pattern == event)


def _value_matches(allowed: Any, value: Any) -> bool:
    if isinstance(allowed, dict) and "prefix" in allowed:
        return isinstance(value, str) and value.startswith(allowed["prefix"])
    return bool(allowed == value)


def passes_filters(filters: list[dict[str, Any]], record: dict[str, Any]) -> bool:
    """No filters lets everything through; otherwise any one filter must match."""
    return not filters or any(matches(f, record) for f in filters)
