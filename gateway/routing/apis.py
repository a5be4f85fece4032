"""Which of a model's deployments may serve a request: those that speak its API (and a pinned one).

The router ranks only these; a model with none for the request's API is, for that API, a model
that does not exist: 404, naming the API and what the model does serve.
"""

from __future__ import annotations

import dataclasses

from gateway.config import ModelConfig, serving
from gateway.errors import ModelNotFound
from gateway.samples import ENDPOINTS, Endpoint

API_TITLES: dict[Endpoint, str] = {
    "chat": "Chat Completions API (/v1/chat/completions)",
    "completions": "Completions API (/v1/completions)",
    "embeddings": "Embeddings API (/v1/embeddings)",
    "responses": "Responses API (/v1/responses)",
    "messages": "Messages API (/v1/messages)",
}


def no_deployment_for(model: ModelConfig, api: Endpoint) -> ModelNotFound:
    """The 404 for a model that no deployment serves over ``api``."""
    served = [e for e in ENDPOINTS if any(e in d.apis for d in model.deployments)]
    return ModelNotFound(
        f"model '{model.name}' has no deployment that serves the {API_TITLES[api]}; "
        f"it is served over: {', '.join(served)}",
        param="model",
        code="model_not_found_for_api",
    )


def speaking(model: ModelConfig, api: Endpoint | None, pinned: str | None = None) -> ModelConfig:
    """``model`` with only the deployments that speak ``api`` (all for None), and only ``pinned`` if given."""
    deployments = model.deployments if api is None else serving(model, api)
    if pinned is not None:
        deployments = tuple(d for d in deployments if d.name == pinned)
    if api is not None and not deployments and pinned is None:
        raise no_deployment_for(model, api)
    if deployments is model.deployments:
        return model
    return dataclasses.replace(model, deployments=deployments)
