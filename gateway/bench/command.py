"""``gateway bench``: choose the targets, run the benchmark, report it, and optionally seed the stats store.

Targets are a config's deployments, called directly with the providers' own keys and model
ids, and/or models through a running gateway (``--url``). Seeding turns the direct targets'
results into the gateway's own ``Sample``s and records them into the store the config names,
so that a gateway sharing that store routes on warm statistics from its first request.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TextIO

import aiohttp

from gateway.bench.accuracy import format_accuracy, summarize_accuracy
from gateway.bench.progress import BenchProgress
from gateway.bench.report import format_table, summarize, summarize_by_provider, write_outputs
from gateway.bench.runner import BenchError, BenchRunner, BenchSettings, BenchTarget, RequestResult
from gateway.bench.tasks import Task, TaskError, builtin_tasks, load_tasks
from gateway.bench.transport_errors import describe_transport_error
from gateway.config import ConfigError, GatewayConfig, load_config, resolve_secrets, serving, token_cost_usd
from gateway.leaderboard import MIN_RANKED_ANSWERS
from gateway.prompts import PromptsError, builtin_prompts, load_prompts
from gateway.samples import Endpoint, Sample
from gateway.stats import StatsStore, StoreHealth, open_stats_store
from gateway.tokens import TokenizerError, load_token_counter


def targets_from_config(
    config: GatewayConfig, environ: Mapping[str, str], models: Sequence[str] = (), api: Endpoint = "chat"
) -> list[BenchTarget]:
    """Every deployment of the config's models (or of ``models`` only) that speaks ``api``, called directly."""
    keys = resolve_secrets(config, environ)
    known = [m.name for m in config.models]
    unknown = [name for name in models if name not in known]
    if unknown:
        raise BenchError(f"{config.source}: no model named {', '.join(unknown)} (known: {', '.join(known)})")
    targets = []
    for model in config.models:
        if models and model.name not in models:
            continue
        for deployment in serving(model, api):
            provider = config.provider(deployment.provider)
            targets.append(
                BenchTarget(
                    name=f"{model.name}/{deployment.name}",
                    kind="direct",
                    base_url=provider.base_url_for(api),
                    routed_model=deployment.model,
                    api_key=keys.get(provider.name),
                    api_key_header=provider.api_key_header,
                    model=model.name,
                    deployment=deployment.name,
                    provider=provider.name,
                    price_in=deployment.price_in,
                    price_out=deployment.price_out,
                )
            )
    return targets


async def targets_from_gateway(url: str, api_key: str | None, models: Sequence[str] = ()) -> list[BenchTarget]:
    """One target per model through the gateway at ``url``; all the models it lists if none are named."""
    base = url.rstrip("/")
    names = list(models)
    if not names:
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
                async with session.get(base + "/models", headers=headers) as response:
                    if response.status != 200:
                        raise BenchError(f"{base}/models answered {response.status}: name the models with --model")
                    listing = await response.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise BenchError(f"cannot list the models of {base}: {describe_transport_error(exc)}") from exc
        except ValueError as exc:
            raise BenchError(f"cannot list the models of {base}: the answer is not JSON") from exc
        names = [m["id"] for m in listing.get("data", []) if isinstance(m, dict) and isinstance(m.get("id"), str)]
        if not names:
            raise BenchError(f"{base}/models lists no models: name them with --model")
    return [
        BenchTarget(name=f"gateway/{name}", kind="gateway", base_url=base, routed_model=name, api_key=api_key)
        for name in names
    ]


def samples_for_store(
    targets: Sequence[BenchTarget], results: Sequence[RequestResult], api: Endpoint = "chat"
) -> list[Sample]:
    """The results of direct targets as the gateway's own ``Sample``s (a gateway already recorded its own)."""
    by_name = {t.name: t for t in targets if t.kind == "direct"}
    samples = []
    for result in results:
        target = by_name.get(result.target)
        if target is None or not (target.model and target.deployment and target.provider):
            continue
        prompt = result.usage_prompt_tokens or result.prompt_tokens_estimate or 0
        output = result.usage_completion_tokens if result.usage_completion_tokens is not None else result.output_tokens
        cost = None
        if result.outcome == "ok" or output:
            cost = token_cost_usd(target.price_in, target.price_out, prompt, output or 0)
        samples.append(
            Sample(
                model=target.model,
                deployment=target.deployment,
                provider=target.provider,
                endpoint=api,
                stream=True,
                outcome=result.outcome,
                started_at=result.started_at,
                status=result.status,
                ttft_s=result.ttft_s,
                first_answer_s=result.first_answer_s,
                tokens_per_s=result.tokens_per_s,
                e2e_s=result.e2e_s,
                output_tokens=result.output_tokens,
                usage_prompt_tokens=result.usage_prompt_tokens,
                usage_completion_tokens=result.usage_completion_tokens,
                prompt_tokens_estimate=result.prompt_tokens_estimate,
                cost_usd=cost,
                kind=result.kind,
                validity=result.validity,
            )
        )
    return samples


async def seed_store(store: StatsStore, samples: Sequence[Sample]) -> StoreHealth:
    """Record ``samples`` into ``store`` and close it, which flushes a shared backend.

    Returns the store's health after the flush: a degraded store (Redis unreachable) or dropped
    samples mean the seeding did not reach the shared statistics.
    """
    await store.start()
    try:
        for sample in samples:
            store.record(sample)
    finally:
        await store.aclose()
    return store.health()


@dataclass(frozen=True, slots=True)
class BenchOptions:
    """What ``gateway bench`` was asked to do."""

    config_path: str | None = None
    url: str | None = None
    models: tuple[str, ...] = ()
    settings: BenchSettings = field(default_factory=BenchSettings)
    prompts_path: str | None = None
    out_prefix: str | None = None
    seed_stats: bool = False
    api_key_env: str = "GATEWAY_API_KEY"
    """Names the variable holding the key sent to ``url`` (a gateway's client key), if it needs one."""
    tasks: bool = False
    """Run structured tasks with exact rubrics (``gateway.bench.tasks``) and report accuracy beside speed."""
    tasks_path: str | None = None
    """The task file (JSONL); None: the built-in tasks."""


async def _run_with_progress(runner: BenchRunner, progress: BenchProgress) -> list[RequestResult]:
    work = asyncio.ensure_future(runner.run())
    await progress.report_while(work)
    return await work


def run_bench_command(
    options: BenchOptions, environ: Mapping[str, str], out: TextIO, progress_stream: TextIO = sys.stderr
) -> int:
    """Run the benchmark as the CLI does: print the table, write the files, seed the store. The exit status.

    Progress goes to ``progress_stream`` (stderr: the table on stdout stays clean for a pipe).
    """
    if options.seed_stats and options.config_path is None:
        return _fail("--seed-stats needs -c CONFIG: its [stats] section names the store")
    try:
        config = load_config(options.config_path) if options.config_path else None
        tasks: list[Task] = []
        settings = options.settings
        if options.tasks:
            tasks = load_tasks(options.tasks_path) if options.tasks_path else builtin_tasks()
            settings = dataclasses.replace(settings, requests=len(tasks))  # each task once per target
        prompts = load_prompts(options.prompts_path) if options.prompts_path and not tasks else builtin_prompts()
        counter = load_token_counter(config.stats.tokenizer if config else "o200k_base")
        targets = targets_from_config(config, environ, options.models, options.settings.api) if config else []
        if options.url:
            key = environ.get(options.api_key_env) or None
            targets += asyncio.run(targets_from_gateway(options.url, key, options.models))
        progress = BenchProgress(targets, settings.requests, progress_stream)
        runner = BenchRunner(
            targets, prompts, settings, counter, on_result=progress.finished, on_start=progress.started, tasks=tasks
        )
    except (ConfigError, PromptsError, TokenizerError, BenchError, TaskError) as exc:
        return _fail(str(exc))
    source = options.prompts_path or f"built-in ({len(prompts)} short structured tasks)"
    if tasks:
        source = f"{options.tasks_path or 'built-in'} tasks ({len(tasks)}, exact rubrics)"
    print(
        f"gateway bench: {len(targets)} target{'' if len(targets) == 1 else 's'} x {settings.requests} requests, "
        f"concurrency {settings.concurrency}, "
        f"max_tokens {settings.max_tokens}, timeout {settings.timeout_s:g}s, prompts: {source}",
        file=out,
        flush=True,
    )
    interrupted = False
    try:
        results = asyncio.run(_run_with_progress(runner, progress))
    except KeyboardInterrupt:
        interrupted = True
        results = runner.finished()
    finally:
        progress.close()
    if interrupted:
        print(f"interrupted: reporting the {len(results)} requests that finished", file=out)
    summaries = summarize(targets, results)
    print(file=out)
    if tasks:
        accuracy = summarize_accuracy(targets, results, [task.name for task in tasks])
        print(format_accuracy(accuracy), file=out, flush=True)
    else:
        print(format_table(summaries), file=out, flush=True)
    by_provider = summarize_by_provider(targets, results)
    if by_provider:
        print("\nThrough the gateway, by the provider that served each request (x-gateway-provider; one with fewer "
              f"than {MIN_RANKED_ANSWERS} answers is not compared):", file=out)  # fmt: skip
        print(format_table(by_provider), file=out, flush=True)
    if options.out_prefix:
        paths = write_outputs(
            options.out_prefix,
            settings=settings,
            prompts_source=source,
            tokenizer=counter.name,
            summaries=summaries,
            results=results,
            by_provider=by_provider,
        )
        print(f"\nwrote {', '.join(str(p) for p in paths)}", file=out)
    if options.seed_stats and config is not None:
        samples = samples_for_store(targets, results, options.settings.api)
        if config.stats.backend == "memory":
            print('warning: [stats] backend is "memory": the samples live only as long as this command', file=out)
        try:
            health = asyncio.run(seed_store(open_stats_store(config.stats), samples))
        except NotImplementedError as exc:
            return _fail(str(exc))
        if health.degraded or health.dropped_samples or health.buffered_samples:
            reason = health.reason or f"{health.dropped_samples + health.buffered_samples} samples not written"
            return _fail(f"seeding the {config.stats.backend} stats store failed: {reason}")
        print(f"seeded {len(samples)} samples into the {config.stats.backend} stats store", file=out)
    return 130 if interrupted else 0


def _fail(message: str) -> int:
    print(f"gateway bench: {message}", file=sys.stderr)
    return 1
