"""Liveness of the kubernetes backend's instances (`owners`): one coordination.k8s.io Lease each.

An instance writes Lease `<name_prefix>-instance-<instance>` in the sandbox namespace (labelled
managed-by, owner and instance; its holder is the instance) and renews it every third of
`kubernetes.owner_lease_s`. A Lease not renewed for that long is a dead instance's: `reap` takes
its pods, then the Lease. An instance with no Lease is unknown and kept (its pods end at their
activeDeadlineSeconds). Without the RBAC to write Leases the backend still runs: it logs why once,
and its own pods are then unknown to its peers and successors.

Not here: which pods `reap` deletes (`owners.Ownership.reapable`, `kubernetes`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from clawgym.errors import ClawgymError, NotFound
from clawgym.sandbox.interface import INSTANCE_LABEL, MANAGED_BY, OWNER_LABEL
from clawgym.sandbox.owners import Liveness

log = logging.getLogger(__name__)


def lease_liveness(lease: client.V1Lease, now: datetime) -> Liveness:
    """An instance's liveness from its Lease: dead once not renewed for its duration."""
    spec = lease.spec
    if spec is None or spec.lease_duration_seconds is None:
        return "unknown"
    renewed = spec.renew_time or spec.acquire_time
    if renewed is None:
        return "unknown"
    return "dead" if (now - renewed).total_seconds() > spec.lease_duration_seconds else "live"


class InstanceLeases:
    """This instance's Lease (renewed while it lives) and the liveness of its owner's others."""

    def __init__(
        self,
        call: Callable[..., Awaitable[Any]],
        api: client.CoordinationV1Api,
        *,
        namespace: str,
        prefix: str,
        owner: str,
        instance: str,
        lease_s: float,
    ) -> None:
        self.call, self.api, self.namespace, self.prefix = call, api, namespace, prefix
        self.owner, self.instance, self.lease_s = owner, instance, lease_s
        self._renewing: asyncio.Task | None = None
        self._warned = False

    def name(self, instance: str) -> str:
        return f"{self.prefix}-instance-{instance}"

    async def start(self) -> None:
        """Writes this instance's Lease and keeps renewing it (idempotent; call on the serving loop)."""
        if self._renewing is None:
            self._renewing = asyncio.ensure_future(self._keep())
            await self._renew()

    async def _keep(self) -> None:
        while True:
            await asyncio.sleep(self.lease_s / 3)
            await self._renew()

    async def _renew(self) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # a MicroTime
        spec = {"holderIdentity": self.instance, "leaseDurationSeconds": int(self.lease_s), "renewTime": now}
        labels = {MANAGED_BY: "clawgym", OWNER_LABEL: self.owner, INSTANCE_LABEL: self.instance}
        try:
            try:
                await self.call(
                    self.api.patch_namespaced_lease, self.name(self.instance), self.namespace, {"spec": spec}
                )
            except NotFound:
                body = {"metadata": {"name": self.name(self.instance), "labels": labels}, "spec": spec}
                await self.call(self.api.create_namespaced_lease, self.namespace, body)
        except ClawgymError as e:  # no RBAC for leases, or the API is away: the next beat tries again
            if not self._warned:
                self._warned = True
                log.warning(
                    "cannot write Lease %s (%s): peers and successors of owner %s cannot tell whether "
                    "this orchestrator lives, so they leave its sandbox pods to their deadlines",
                    self.name(self.instance), e, self.owner,
                )  # fmt: skip

    async def liveness(self, owner: str) -> dict[str, Liveness]:
        """The recorded instances of `owner` by liveness ({} when Leases cannot be read)."""
        selector = f"{MANAGED_BY}=clawgym,{OWNER_LABEL}={owner}"
        try:
            leases = await self.call(self.api.list_namespaced_lease, self.namespace, label_selector=selector)
        except ClawgymError as e:
            log.warning(
                "cannot list the Leases of owner %s (%s): its other instances count as live", owner, e
            )
            return {}
        now = datetime.now(UTC)
        found = {}
        for lease in leases.items:
            instance = (lease.metadata.labels or {}).get(INSTANCE_LABEL, "")
            if instance:
                found[instance] = "live" if instance == self.instance else lease_liveness(lease, now)
        return found

    async def forget(self, instance: str) -> None:
        """Deletes a dead instance's Lease (its pods are gone)."""
        with contextlib.suppress(ClawgymError):
            await self.call(self.api.delete_namespaced_lease, self.name(instance), self.namespace)

    async def close(self) -> None:
        """Stops renewing and deletes this instance's Lease (its pods are gone by then)."""
        if self._renewing is not None:
            self._renewing.cancel()
            await asyncio.gather(self._renewing, return_exceptions=True)
            self._renewing = None
            await self.forget(self.instance)
