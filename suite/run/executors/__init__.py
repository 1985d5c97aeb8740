"""Where cases run: local worker processes forked from the fork server, or Ray actors; the worker loop
and the watch that ends a worker with its runner."""

from __future__ import annotations

from suite.errors import UsageError


def check(executor: str, address: str | None, ray_workers: int | None, allocator: str) -> None:
    """Before any work: Ray where asked for (how to install it where it is missing), its options only with
    it, and an allocator the workers can start with (suite.machine.allocator.check)."""
    from suite.machine import allocator as allocators

    if executor == "ray":
        from suite.run.executors.ray_pool import ray_module

        ray_module()  # without Ray, say how to install it
    elif address or ray_workers:
        raise UsageError("--address and --ray-workers go with --executor ray")
    if ray_workers is not None and ray_workers < 1:
        raise UsageError(f"--ray-workers {ray_workers} (allowed: integers >= 1)")
    allocators.check(allocator, executor)


def resolved(settings, executor: str):
    """The settings with `auto` made the allocator it means for this executor (suite.machine.allocator):
    a plan says which its workers ran on."""
    import dataclasses

    from suite.machine import allocator

    return dataclasses.replace(settings, allocator=allocator.resolve(settings.allocator, executor))
