"""The Helm chart without a cluster: lint, render, Kubernetes schemas, and what each values file promises.

Renders helm/clawgym with the default, production and k8s-local values, validates every manifest
against the Kubernetes schemas of `kubernetes-validate` (strict: unknown fields fail), and checks
the chart's promises: non-root pods, GPUs where asked, RBAC for the orchestrator, sandbox egress
only to the proxy, the database password only in a Secret, and the API versions chosen for 1.20
versus current Kubernetes.
"""

import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from clawgym.inference.config import InferenceConfig
from clawgym.sandbox import SandboxSpec
from clawgym.sandbox.k8s_pods import base_labels

CHART = Path(__file__).resolve().parents[2] / "helm" / "clawgym"

VALUES = {"defaults": (), "production": ("values-production.yaml",), "k8s-local": ("values-k8s-local.yaml",)}
CURRENT = "1.31.0"
WORKLOADS = ("Deployment", "StatefulSet")


def _by(docs: list[dict], kind: str, suffix: str = "") -> dict:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]
    assert len(found) == 1, (
        f"expected one {kind} named *{suffix}, found {[d['metadata']['name'] for d in found]}"
    )
    return found[0]


@pytest.mark.parametrize("name", VALUES)
def test_helm_lint_passes(helm_bin: str, name: str):
    cmd = [helm_bin, "lint", "--strict", str(CHART)] + [
        a for v in VALUES[name] for a in ("-f", str(CHART / v))
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"helm lint with {name} values:\n{done.stdout}{done.stderr}"


@pytest.mark.parametrize("name", ["defaults", "production"])
def test_rendered_manifests_validate_against_the_kubernetes_schemas(render, name: str):
    """Strict schema validation (current Kubernetes) of every object, ServiceMonitor (a CRD) excepted."""
    docs = render(*VALUES[name], sets={"metrics.serviceMonitor.force": "true"}, kube_version=CURRENT)
    errors = []
    for doc in docs:
        if doc["kind"] == "ServiceMonitor":
            assert doc["apiVersion"] == "monitoring.coreos.com/v1", (
                "ServiceMonitor of the Prometheus Operator"
            )
            continue
        try:
            kubernetes_validate.validate(doc, CURRENT, strict=True)
        except kubernetes_validate.ValidationError as e:
            errors.append(f"{doc['kind']}/{doc['metadata']['name']}: {e.message} at {list(e.path)}")
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("name", VALUES)
def test_every_pod_runs_non_root_without_privilege_escalation(render, name: str):
    for doc in render(*VALUES[name], sets={"trainer.enabled": "true"}):
        if doc["kind"] not in WORKLOADS:
            continue
        spec = doc["spec"]["template"]["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True, f"{doc['metadata']['name']} may run as root"
        for c in spec["containers"]:
            assert c["securityContext"]["allowPrivilegeEscalation"] is False, f"{c['name']} may escalate"
            assert c["securityContext"]["capabilities"]["drop"] == ["ALL"], f"{c['name']} keeps capabilities"


def test_inference_and_trainer_get_gpus_and_the_trainer_runs_under_torchrun(render):
    docs = render("values-production.yaml")
    inference = _by(docs, "StatefulSet", "-inference")
    assert inference["spec"]["replicas"] == 4, "production asks for 4 inference replicas"
    container = inference["spec"]["template"]["spec"]["containers"][0]
    limits = container["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == 2, f"a replica is a tensor-parallel group of 2 GPUs: {limits}"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (
        env["CLAWGYM_INFERENCE__TENSOR_PARALLEL_SIZE"] == "2"
        and env["CLAWGYM_INFERENCE__DTYPE"] == "bfloat16"
    )
    assert env["CLAWGYM_INFERENCE__MAX_MODEL_LEN"] == "65536", env
    trainer = _by(docs, "StatefulSet", "-trainer")
    assert trainer["spec"]["replicas"] == 2, "2 trainer nodes"
    c = trainer["spec"]["template"]["spec"]["containers"][0]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 8, "8 GPUs per trainer node"
    assert c["command"][0] == "torchrun" and "--nproc-per-node=8" in c["command"], c["command"]
    assert any(a.startswith("--rdzv-endpoint=") for a in c["command"]), (
        "multi-node torchrun needs a rendezvous"
    )
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["CLAWGYM_TRAINER__CHECKPOINT_URI"].startswith("s3://"), (
        "production checkpoints go to the object store"
    )
    assert c.get("envFrom") == [{"secretRef": {"name": "clawgym-s3"}}], (
        "object-store credentials from the Secret"
    )


def test_the_orchestrator_may_run_and_exec_into_pods_and_manage_policies_in_the_sandbox_namespace_only(
    render,
):
    docs = render()
    role = _by(docs, "Role", "-orchestrator")
    assert role["metadata"]["namespace"] == "clawgym-sandboxes", "the Role lives in the sandbox namespace"
    rules = {(r["apiGroups"][0], res): set(r["verbs"]) for r in role["rules"] for res in r["resources"]}
    assert {"create", "delete", "get", "list", "watch"} <= rules[("", "pods")], rules
    assert "create" in rules[("", "pods/exec")], "exec (files in and out) needs pods/exec create"
    assert {"create", "delete"} <= rules[("networking.k8s.io", "networkpolicies")], rules
    assert {"get", "list", "create", "patch", "delete"} <= rules[("coordination.k8s.io", "leases")], (
        "each orchestrator process renews a Lease: reap takes only a gone one's pods"
    )
    assert not [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding")], (
        "no cluster-wide rights"
    )
    binding = _by(docs, "RoleBinding", "-orchestrator")
    sa = _by(docs, "ServiceAccount", "-orchestrator")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": "clawgym"}
    ]
    sts = _by(docs, "StatefulSet", "-orchestrator")
    assert sts["spec"]["template"]["spec"]["serviceAccountName"] == sa["metadata"]["name"]


def test_sandbox_pods_may_reach_only_the_proxy(render):
    """Egress: the proxy pods' port in the release namespace, and DNS; no ingress at all."""
    docs = render(kube_version=CURRENT)
    policy = _by(docs, "NetworkPolicy", "-sandbox-egress")
    assert policy["metadata"]["namespace"] == "clawgym-sandboxes"
    assert policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "sandbox"
    assert policy["spec"]["ingress"] == [] and set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    to_proxy = policy["spec"]["egress"][0]
    peer = to_proxy["to"][0]
    assert peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "proxy"
    assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "clawgym"}
    assert to_proxy["ports"] == [{"protocol": "TCP", "port": 8080}], "only the proxy's port"
    assert all(p["port"] == 53 for rule in policy["spec"]["egress"][1:] for p in rule["ports"]), (
        "else only DNS"
    )


def test_on_kubernetes_1_20_the_chart_uses_the_apis_and_labels_1_20_has(render):
    """1.20: policy/v1beta1 PDBs, autoscaling/v2beta2 HPAs, and its own namespace label for selectors."""
    sets = {"proxy.autoscaling.enabled": "true"}
    old = render(sets=sets, kube_version="1.20.2", api_versions=("policy/v1beta1", "autoscaling/v2beta2"))
    assert _by(old, "PodDisruptionBudget", "-proxy")["apiVersion"] == "policy/v1beta1"
    assert _by(old, "HorizontalPodAutoscaler", "-proxy")["apiVersion"] == "autoscaling/v2beta2"
    peer = _by(old, "NetworkPolicy", "-sandbox-egress")["spec"]["egress"][0]["to"][0]
    assert peer["namespaceSelector"]["matchLabels"] == {"clawgym.dev/namespace": "clawgym"}, peer
    ns = _by(old, "Namespace", "clawgym-sandboxes")
    assert ns["metadata"]["labels"]["clawgym.dev/namespace"] == "clawgym-sandboxes", (
        "created namespaces carry it"
    )
    new = render(sets=sets, kube_version=CURRENT, api_versions=("policy/v1", "autoscaling/v2"))
    assert _by(new, "PodDisruptionBudget", "-proxy")["apiVersion"] == "policy/v1"
    assert _by(new, "HorizontalPodAutoscaler", "-proxy")["apiVersion"] == "autoscaling/v2"


def test_the_database_password_is_only_in_a_secret(render):
    """Bundled PostgreSQL: a Secret with a generated password, read by postgres and (as PGPASSWORD) the services."""
    docs = render()
    secret = _by(docs, "Secret", "-db")
    assert len(secret["data"]["password"]) >= 32, "a generated password of 24+ characters"
    for doc in docs:
        if doc["kind"] not in WORKLOADS:
            continue
        for c in doc["spec"]["template"]["spec"]["containers"]:
            for e in c.get("env", []):
                assert "value" not in e or secret["data"]["password"] not in e["value"], (
                    f"{c['name']} has it in clear"
                )
                if e["name"] in ("PGPASSWORD", "POSTGRES_PASSWORD"):
                    assert e["valueFrom"]["secretKeyRef"]["name"] == secret["metadata"]["name"]
    external = render("values-production.yaml")
    assert not [d for d in external if d["kind"] == "Secret"], "an existing Secret is used, none created"
    store = _by(external, "Deployment", "-store")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in store["env"]}
    assert env["PGPASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "clawgym-db", "key": "password"}
    assert env["CLAWGYM_STORE__URL"]["value"].endswith("?sslmode=require"), env["CLAWGYM_STORE__URL"]


def test_pods_carry_prometheus_scrape_annotations_and_a_service_monitor_is_optional(render):
    docs = render()
    proxy = _by(docs, "Deployment", "-proxy")["spec"]["template"]["metadata"]["annotations"]
    assert proxy == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "8080",
        "prometheus.io/path": "/metrics",
    }
    assert not [d for d in docs if d["kind"] == "ServiceMonitor"], (
        "no ServiceMonitor without the operator's API"
    )
    with_api = render(
        sets={"metrics.serviceMonitor.enabled": "true"},
        api_versions=("monitoring.coreos.com/v1/ServiceMonitor",),
    )
    assert [d for d in with_api if d["kind"] == "ServiceMonitor"], (
        "ServiceMonitor rendered when the API exists"
    )


def test_k8s_local_values_need_no_registry_no_storage_and_no_cluster_dns(render):
    """1.20 single node: local images never pulled, no PVCs, hostNetwork, the chart's own PostgreSQL
    and Redis off the host's ports, replicas on distinct or shared ports, the trainer's run."""
    docs = render("values-k8s-local.yaml", kube_version="1.20.2")
    assert not [d for d in docs if d["kind"] == "PersistentVolumeClaim"], "no provisioner on k8s-local"
    for doc in docs:
        if doc["kind"] not in WORKLOADS:
            continue
        spec = doc["spec"]["template"]["spec"]
        assert spec.get("hostNetwork") is True, f"{doc['metadata']['name']} is not on the host network"
        assert "volumeClaimTemplates" not in doc["spec"], "no PVC templates"
        for c in spec["containers"] + spec.get("initContainers", []):
            local = c["image"].startswith(("localhost/", "clawgym-standin/"))
            assert c["imagePullPolicy"] == "Never" and local, c["image"]
    env = {
        e["name"]: e.get("value")
        for e in _by(docs, "Deployment", "-store")["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["CLAWGYM_STORE__URL"] == "postgresql+psycopg://clawgym@127.0.0.1:15432/clawgym", env
    assert env["CLAWGYM_STORE__BUS_URL"] == "redis://:$(REDIS_PASSWORD)@127.0.0.1:16379/0", env
    assert env["CLAWGYM_INFERENCE__GRPC_URL"] == "127.0.0.1:15052,127.0.0.1:15053", "2 replicas, port + N"
    postgres = _by(docs, "StatefulSet", "-postgresql")["spec"]["template"]["spec"]["containers"][0]
    assert postgres["args"] == ["-p", "15432"], "PostgreSQL listens off the host's own 5432"
    redis = _by(docs, "StatefulSet", "-redis")["spec"]["template"]["spec"]["containers"][0]
    assert redis["args"][:3] == ["redis-server", "--port", "16379"], redis["args"]
    proxy = _by(docs, "Deployment", "-proxy")
    assert proxy["spec"]["replicas"] == 2
    c = proxy["spec"]["template"]["spec"]["containers"][0]
    assert "ports" not in c, "on the host network a declared port would keep the second replica off the node"
    proxy_env = {e["name"]: e.get("value") for e in c["env"]}
    assert (
        proxy_env["CLAWGYM_PROXY__REUSE_PORT"] == "true"
        and proxy_env["CLAWGYM_PROXY__INSTANCE"] == "$(POD_NAME)"
    )
    trainer = _by(docs, "StatefulSet", "-trainer")["spec"]["template"]["spec"]
    (init,) = trainer["initContainers"]
    assert init["command"][:2] == ["chown", "10001:10001"], (
        "the hostPath checkpoint folder is handed to uid 10001"
    )
    run = yaml.safe_load(_by(docs, "ConfigMap", "-trainer-run")["data"]["run.yaml"])
    assert run["trainer"]["algorithm"]["name"] == "grpo" and run["trainer"]["harnesses"] == [
        {"name": "reference", "weight": 1.0}
    ], run
    trainer_env = {e["name"]: e.get("value") for e in trainer["containers"][0]["env"]}
    assert trainer_env["CLAWGYM_TRAINER__AFTER_RUN"] == "serve", "a finished run stays up (no restart loop)"


def test_grpc_services_are_ready_by_the_grpc_health_service_where_the_kubelet_can_ask_it(render):
    """1.24+: readiness asks grpc.health.v1 on the service port; 1.20 (no gRPC probes): a TCP connect."""
    sets = {"store.port": "50061", "inference.port": "50062", "orchestrator.port": "50063"}
    for kube_version, expect in ((CURRENT, "grpc"), ("1.20.2", "tcpSocket")):
        docs = render(sets=sets, kube_version=kube_version)
        for name, port in (("store", 50061), ("inference", 50062), ("orchestrator", 50063)):
            kind = "StatefulSet" if name in ("inference", "orchestrator") else "Deployment"
            c = _by(docs, kind, f"-{name}")["spec"]["template"]["spec"]["containers"][0]
            probe = c["readinessProbe"]
            assert expect in probe, f"{name} on {kube_version}: {probe}"
            if expect == "grpc":
                assert probe["grpc"]["port"] == port, f"{name}: the probe asks the gRPC port"
            assert "tcpSocket" in c["livenessProbe"], f"{name}: liveness stays a TCP connect"


def test_a_sandbox_pod_is_selected_by_its_network_policy_and_by_no_store_policy(render):
    """issue #16: the labels a real sandbox pod gets (`k8s_pods.base_labels`) decide the policies it
    falls under. Policies add up, so a network="none" pod must not be selected by the proxy policy,
    and no policy of the release's own stores (PostgreSQL, Redis) may admit a sandbox."""
    docs = [d for d in render(kube_version=CURRENT) if d["kind"] == "NetworkPolicy"]

    def selecting(labels: dict[str, str], namespace: str) -> set[str]:
        return {
            d["metadata"]["name"]
            for d in docs
            if d["metadata"].get("namespace", "clawgym") == namespace
            and d["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
        }

    online = base_labels("orchestrator-0", SandboxSpec(network="proxy"))
    offline = base_labels("orchestrator-0", SandboxSpec(network="none"))
    assert selecting(online, "clawgym-sandboxes") == {"cg-clawgym-sandbox-egress"}
    assert selecting(offline, "clawgym-sandboxes") == {"cg-clawgym-sandbox-no-network"}
    deny = _by(docs, "NetworkPolicy", "-sandbox-no-network")["spec"]
    assert (
        deny["egress"] == [] and deny["ingress"] == [] and set(deny["policyTypes"]) == {"Ingress", "Egress"}
    )
    for store in ("postgresql", "redis"):
        for rule in _by(docs, "NetworkPolicy", f"-{store}")["spec"]["ingress"]:
            for peer in rule["from"]:
                assert "namespaceSelector" not in peer, f"{store} admits pods of other namespaces: {peer}"
                assert not peer["podSelector"]["matchLabels"].items() <= online.items(), (
                    f"{store} admits sandbox pods: {peer}"
                )


def _containers(docs: list[dict]) -> dict[str, dict]:
    """Every workload's containers by name."""
    return {
        c["name"]: c
        for d in docs
        if d["kind"] in WORKLOADS
        for c in d["spec"]["template"]["spec"]["containers"]
    }


@pytest.mark.parametrize("name", VALUES)
def test_every_service_gets_the_rpc_secret_from_a_secret_and_listens_on_all_interfaces_explicitly(
    render, name: str
):
    """Each clawgym component reads CLAWGYM_RPC__SECRET from the rpc Secret (never a value in the pod
    spec) and is told to listen on 0.0.0.0, which its default (loopback) is not."""
    docs = render(*VALUES[name])
    containers = _containers(docs)
    wanted = [c for c in ("store", "inference", "proxy", "orchestrator", "trainer") if c in containers]
    assert len(wanted) >= 3, f"{name}: the components rendered: {sorted(containers)}"
    secrets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}
    for component in wanted:
        env = {e["name"]: e for e in containers[component]["env"]}
        ref = env["CLAWGYM_RPC__SECRET"]["valueFrom"]["secretKeyRef"]
        assert ref["key"] == "secret" and "value" not in env["CLAWGYM_RPC__SECRET"], (component, ref)
        if name == "production":
            assert ref["name"] == "clawgym-rpc", "production brings its own Secret"
        else:
            assert len(secrets[ref["name"]]["data"]["secret"]) >= 32, f"{component}: a generated secret"
        section = component.upper()
        assert env[f"CLAWGYM_{section}__HOST"]["value"] == "0.0.0.0", f"{component} must listen explicitly"


def test_the_bundled_redis_requires_a_password_that_the_bus_urls_carry(render):
    """Redis runs with --requirepass from its Secret; the services' bus and live-state URLs carry the
    same password by $(REDIS_PASSWORD), defined before them from that Secret."""
    docs = render()
    containers = _containers(docs)
    redis = containers["redis"]
    redis_env = {e["name"]: e for e in redis["env"]}
    secret_name = redis_env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"]
    assert redis["args"][-2:] == ["--requirepass", "$(REDIS_PASSWORD)"], redis["args"]
    assert redis_env["REDISCLI_AUTH"]["value"] == "$(REDIS_PASSWORD)", "the readiness probe must log in"
    assert len(_by(docs, "Secret", "-redis")["data"]["password"]) >= 32
    for component in ("store", "proxy", "orchestrator", "inference"):
        env = containers[component]["env"]
        names = [e["name"] for e in env]
        by = {e["name"]: e for e in env}
        assert by["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == secret_name, component
        urls = ["CLAWGYM_STORE__BUS_URL"] + (["CLAWGYM_PROXY__REDIS_URL"] if component == "proxy" else [])
        for url in urls:
            assert by[url]["value"].startswith("redis://:$(REDIS_PASSWORD)@"), (component, by[url]["value"])
            assert names.index("REDIS_PASSWORD") < names.index(url), "Kubernetes expands only earlier vars"


def test_the_services_reach_the_bundled_postgres_as_a_non_superuser_owning_only_its_database(render):
    """The superuser stays `postgres` (socket only); the init script (the compose one, byte for byte)
    creates the services' role NOSUPERUSER as the owner of the clawgym database."""
    docs = render()
    containers = _containers(docs)
    pg = containers["postgresql"]
    env = {e["name"]: e for e in pg["env"]}
    assert "POSTGRES_USER" not in env, "POSTGRES_USER would make the services' role a superuser"
    assert env["POSTGRES_PASSWORD"]["valueFrom"]["secretKeyRef"]["key"] == "admin-password"
    assert env["CLAWGYM_DB_PASSWORD"]["valueFrom"]["secretKeyRef"]["key"] == "password"
    store_url = {e["name"]: e for e in containers["store"]["env"]}["CLAWGYM_STORE__URL"]["value"]
    assert store_url.startswith(f"postgresql+psycopg://{env['CLAWGYM_DB_USER']['value']}@"), store_url
    assert env["CLAWGYM_DB_USER"]["value"] != "postgres" and env["CLAWGYM_DB_NAME"]["value"] == "clawgym"
    init = _by(docs, "ConfigMap", "-postgresql-init")
    (script,) = init["data"].values()
    assert script == (CHART / "files" / "postgres-init.sh").read_text(), "compose mounts this same file"
    assert "NOSUPERUSER NOCREATEDB NOCREATEROLE" in script and "reject" in script
    mounts = {m["mountPath"]: m for m in pg["volumeMounts"]}
    assert mounts["/docker-entrypoint-initdb.d"]["readOnly"] is True
    db_secret = _by(docs, "Secret", "-db")["data"]
    assert db_secret["password"] != db_secret["admin-password"], "two passwords, both generated"


def test_inference_loads_checkpoints_only_where_the_trainer_writes_them(render):
    """inference.checkpoint_root is the trainer's checkpoint_uri: the shared volume, or the object store."""
    for sets in ({}, {"checkpoints.uri": "s3://bucket/clawgym"}):
        containers = _containers(render(sets=sets))
        inference = {e["name"]: e.get("value") for e in containers["inference"]["env"]}
        trainer = {e["name"]: e.get("value") for e in containers["trainer"]["env"]}
        assert (
            inference["CLAWGYM_INFERENCE__CHECKPOINT_ROOT"] == trainer["CLAWGYM_TRAINER__CHECKPOINT_URI"]
        ), sets


def _env(doc: dict) -> dict[str, str | None]:
    return {e["name"]: e.get("value") for e in doc["spec"]["template"]["spec"]["containers"][0]["env"]}


def test_inference_grpc_url_lists_every_replica_of_the_inference_statefulset(render):
    """inference.grpc_url names each replica (so clients build a ReplicatedEngine: rollouts stick to one,
    LoadWeights reaches all), not one dns:/// name; the addresses are the StatefulSet's pod names under
    its headless governing Service, which publishes replicas that are not ready yet."""
    docs = render("values-production.yaml", sets={"trainer.enabled": "true"})
    sts = _by(docs, "StatefulSet", "-inference")
    service = _by(docs, "Service", "-inference")
    assert sts["spec"]["serviceName"] == service["metadata"]["name"], "the headless Service governs the set"
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    name, port = sts["metadata"]["name"], 50052
    wanted = ",".join(f"{name}-{i}.{service['metadata']['name']}:{port}" for i in range(4))
    clients = [
        d for d in docs if d["kind"] in WORKLOADS and d["metadata"]["name"].endswith(("-proxy", "-trainer"))
    ]
    assert len(clients) == 2, [d["metadata"]["name"] for d in clients]
    for doc in clients:
        assert _env(doc)["CLAWGYM_INFERENCE__GRPC_URL"] == wanted, (
            f"{doc['metadata']['name']} must see every inference replica: {_env(doc)['CLAWGYM_INFERENCE__GRPC_URL']}"
        )
    three = render(sets={"inference.replicas": "3"})
    assert _env(_by(three, "Deployment", "-proxy"))["CLAWGYM_INFERENCE__GRPC_URL"].count(",") == 2, (
        "the list follows inference.replicas"
    )


def test_on_the_host_network_replica_n_serves_port_plus_n_and_is_probed_there(render):
    """k8s-local (hostNetwork, one node): replicas cannot share a port, so replica N listens on port + N
    and metricsPort + N, declares no (host) port, and its probes ask its own port; the list matches."""
    docs = render("values-k8s-local.yaml", sets={"inference.replicas": "2"}, kube_version="1.20.2")
    sts = _by(docs, "StatefulSet", "-inference")
    c = sts["spec"]["template"]["spec"]["containers"][0]
    assert "ports" not in c, (
        f"a declared port is a hostPort the second replica could not get: {c.get('ports')}"
    )
    env = _env(sts)
    assert "CLAWGYM_INFERENCE__PORT" not in env and "POD_NAME" in env, env
    script = c["command"][2]
    assert c["command"][:2] == ["sh", "-c"] and '--port "$((15052 + i))"' in script, c["command"]
    assert '--metrics-port "$((19102 + i))"' in script, script
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert "$((15052 + ${POD_NAME##*-}))" in " ".join(c[probe]["exec"]["command"]) or (
            "15052 + ${POD_NAME##*-}" in " ".join(c[probe]["exec"]["command"])
        ), f"{probe} must ask this replica's port: {c[probe]}"
    proxy = _by(docs, "Deployment", "-proxy")
    assert _env(proxy)["CLAWGYM_INFERENCE__GRPC_URL"] == "127.0.0.1:15052,127.0.0.1:15053", _env(proxy)


def test_each_orchestrator_replica_owns_its_sandboxes_under_its_own_stable_name(render):
    """Orchestrator replicas are a StatefulSet and each one's sandbox owner is its pod name: unique among
    replicas (none reaps or fails another's live work) and kept by a restarted replica (which takes
    over what its predecessor left at once)."""
    docs = render(sets={"orchestrator.replicas": "2"})
    sts = _by(docs, "StatefulSet", "-orchestrator")
    assert sts["spec"]["replicas"] == 2 and sts["spec"]["podManagementPolicy"] == "Parallel"
    env = {e["name"]: e for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}, env["POD_NAME"]
    assert env["CLAWGYM_SANDBOX__OWNER"]["value"] == "$(POD_NAME)", env["CLAWGYM_SANDBOX__OWNER"]
    names = list(env)
    assert names.index("POD_NAME") < names.index("CLAWGYM_SANDBOX__OWNER"), (
        "$(POD_NAME) expands only if defined first"
    )


def test_a_vllm_replica_requests_as_many_gpus_as_its_tensor_parallel_group_and_its_settings_load(
    render, helm_bin
):
    docs = render(
        sets={
            "inference.gpus": "4",
            "inference.vllm.tensorParallelSize": "4",
            "inference.vllm.enforceEager": "true",
        }
    )
    container = _by(docs, "StatefulSet", "-inference")["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 4
    env = {
        e["name"]: e["value"]
        for e in container["env"]
        if "value" in e and e["name"].startswith("CLAWGYM_INFERENCE__")
    }
    cfg = InferenceConfig(**{k.removeprefix("CLAWGYM_INFERENCE__").lower(): v for k, v in env.items()})
    assert cfg.engine == "vllm" and cfg.tensor_parallel_size == 4 and cfg.enforce_eager, cfg
    mismatch = subprocess.run(
        [
            helm_bin,
            "template",
            "cg",
            str(CHART),
            "--set",
            "inference.gpus=1",
            "--set",
            "inference.vllm.tensorParallelSize=2",
        ],
        capture_output=True,
        text=True,
    )
    assert mismatch.returncode != 0 and "tensorParallelSize" in mismatch.stderr, mismatch.stderr
