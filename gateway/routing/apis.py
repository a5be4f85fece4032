"""Which of a model's deployments may serve a request: those that speak its API, natively or translated.

A conversational request (chat, Responses, Messages) may go to a deployment that speaks another of them and
has ``translate`` on, in the first of its APIs in ``TRANSLATABLE``'s order (chat's mapping is the most
complete). All of them are ranked as one pool; a model with none for the request's API is a 404 for that API.
"""

from __future__ import annotations

import dataclasses
from typing import cast

from gateway.config import DeploymentConfig, ModelConfig
from gateway.errors import ModelNotFound
from gateway.samples import ENDPOINTS, Endpoint
from gateway.translate.ir import TRANSLATABLE, Api

API_TITLES: dict[Endpoint, str] = {
    "chat": "Chat Completions API (/v1/chat/completions)",
    "completions": "Completions API (/v1/completions)",
    "embeddings": "Embeddings API (/v1/embeddings)",
    "responses": "Responses API (/v1/responses)",
    "messages": "Messages API (/v1/messages)",
}
API_PATHS: dict[Endpoint, str] = {
    "chat": "/chat/completions",
    "completions": "/completions",
    "embeddings": "/embeddings",
    "responses": "/responses",
    "messages": "/messages",
}


def upstream_api(deployment: DeploymentConfig, api: Endpoint) -> Endpoint | None:
    """The API ``deployment`` is sent a request on ``api`` in: ``api`` itself, another by translation, or None."""
    if api in deployment.apis:
        return api
    if not deployment.translate or api not in TRANSLATABLE:
        return None
    return next((a for a in TRANSLATABLE if a in deployment.apis), None)


def translated_to(deployment: DeploymentConfig, api: Endpoint) -> Api | None:
    """The API a request on ``api`` is translated to for ``deployment`` (None: native, or not reachable)."""
    target = upstream_api(deployment, api)
    return cast(Api, target) if target is not None and target != api else None


def reachable(model: ModelConfig, api: Endpoint) -> tuple[DeploymentConfig, ...]:
    """The model's deployments that serve ``api``, natively or by translation."""
    return tuple(d for d in model.deployments if upstream_api(d, api) is not None)


def no_deployment_for(model: ModelConfig, api: Endpoint) -> ModelNotFound:
    """The 404 for a model that no deployment serves over ``api``."""
    served = [e for e in ENDPOINTS if reachable(model, e)]
    return ModelNotFound(
        f"model '{model.name}' has no deployment that serves the {API_TITLES[api]}; "
        f"it is served over: {', '.join(served)}",
        param="model",
        code="model_not_found_for_api",
    )


def speaking(model: ModelConfig, api: Endpoint | None, pinned: str | None = None) -> ModelConfig:
    """``model`` with only the deployments that serve ``api`` (all for None), and only ``pinned`` if given."""
    deployments = model.deployments if api is None else reachable(model, api)
    if pinned is not None:
        deployments = tuple(d for d in deployments if d.name == pinned)
    if api is not None and not deployments and pinned is None:
        raise no_deployment_for(model, api)
    if deployments == model.deployments:
        return model
    return dataclasses.replace(model, deployments=deployments)
