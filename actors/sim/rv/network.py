"""Connectivity between the VMs of the nested cluster: CiliumNetworkPolicies of the parent cluster,
iptables packet-loss rules and iperf3 load run by Jobs on the nested nodes.

Everything here is pure: :class:`NetworkModel` is built from plain data and answers "can a DRBD
TCP connection between VM a and VM b on port p be up?", plus how lossy/loaded the link is.

Cilium semantics modelled (cilium.io/v2, ``spec`` or ``specs``):

* ``endpointSelector`` selects the VM pods (endpoints) of the policy's namespace by labels; every
  endpoint also carries ``io.kubernetes.pod.namespace`` (``k8s:`` key prefixes are ignored).
* ``ingress``/``egress`` allow rules and ``ingressDeny``/``egressDeny`` deny rules with
  ``fromEndpoints``/``toEndpoints`` (selectors; without a namespace label they match the policy's
  namespace only), ``fromEntities``/``toEntities`` (``all``/``cluster`` match every VM; ``host``,
  ``remote-node``, ``world``... match none), CIDR peers (never match pods, as in Cilium), and
  ``toPorts`` (``port``/``endPort``/``protocol``; port 0 or none = all ports). A rule with no L3
  peer field matches every peer.
* Deny beats allow. An endpoint selected by a policy that has rules (allow or deny) in a direction
  is in default-deny for that direction unless ``enableDefaultDeny`` says otherwise; then only
  explicitly allowed traffic passes.
* Connection tracking: a TCP connection a->b is possible when a may send (egress) to b on the port
  and b may receive (ingress) it. DRBD peers connect to each other's port, so a link is up when
  either direction can open the connection.

iptables: ``-A``/``-I`` of ``INPUT`` (``-s`` peer) or ``OUTPUT`` (``-d`` peer) with ``-j DROP`` or
``REJECT``, optional ``-p tcp|udp|all`` and ``-m statistic --mode random --probability P`` (else
P = 1), ``-m comment --comment C``; ``-D`` by comment (a ``COMMENT=`` variable or a ``grep``
pattern, as in the megatest delete Job: every rule with it), by rule number, or by rule spec (the
first match); ``-F`` flushes. Losses of all rules on
both directions of a link combine: loss = 1 - prod(1 - p).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from actors.sim.selectors import LabelSelector, compile_label_selector
from actors.sim.util import parse_go_duration

__all__ = [
    "ALL_PEERS",
    "Endpoint",
    "IptablesOp",
    "LoadSpec",
    "LossRule",
    "NetworkModel",
    "PolicySet",
    "parse_iperf",
    "parse_iptables",
]

NAMESPACE_LABEL = "io.kubernetes.pod.namespace"
_ALL_ENTITIES = frozenset({"all", "cluster"})


class _AllPeers(frozenset[str]):
    """Marker: every endpoint."""

    def __contains__(self, item: object) -> bool:
        return True

    def __repr__(self) -> str:
        return "ALL"


ALL_PEERS: frozenset[str] = _AllPeers()


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A VM as a Cilium endpoint: its virt-launcher pod's namespace and labels."""

    vm: str
    namespace: str
    labels: Mapping[str, str]


# ------------------------------------------------------------------------------- policies

PortRange = tuple[int, int, str]  # (low, high, protocol TCP|UDP|SCTP|ANY); low 0 = every port


@dataclass(frozen=True, slots=True)
class _Rule:
    subject: frozenset[str]
    peers: frozenset[str]
    ports: tuple[PortRange, ...] | None  # None = every port and protocol

    def matches_port(self, port: int, proto: str) -> bool:
        if self.ports is None:
            return True
        for lo, hi, p in self.ports:
            if p not in ("ANY", proto):
                continue
            if lo == 0 or lo <= port <= hi:
                return True
        return False


def _strip_k8s(key: str) -> str:
    for prefix in ("k8s:", "any:"):
        if key.startswith(prefix):
            return key[len(prefix) :]
    return key


def _selector(sel: Mapping[str, Any] | None) -> tuple[LabelSelector, bool]:
    """Compile a Cilium endpoint selector; also say whether it names a namespace itself."""
    sel = sel or {}
    match_labels = {_strip_k8s(str(k)): str(v) for k, v in (sel.get("matchLabels") or {}).items()}
    exprs = []
    for e in sel.get("matchExpressions") or ():
        e2 = dict(e)
        e2["key"] = _strip_k8s(str(e.get("key", "")))
        exprs.append(e2)
    names_ns = NAMESPACE_LABEL in match_labels or any(e["key"] == NAMESPACE_LABEL for e in exprs)
    compiled: dict[str, Any] = {}
    if match_labels:
        compiled["matchLabels"] = match_labels
    if exprs:
        compiled["matchExpressions"] = exprs
    return compile_label_selector(compiled or None), names_ns


def _select(endpoints: Mapping[str, Endpoint], sel: Mapping[str, Any] | None, namespace: str) -> set[str]:
    compiled, names_ns = _selector(sel)
    out = set()
    for vm, ep in endpoints.items():
        if not names_ns and ep.namespace != namespace:
            continue
        if compiled.matches(ep.labels):
            out.add(vm)
    return out


def _ports(rule: Mapping[str, Any]) -> tuple[PortRange, ...] | None:
    to_ports = rule.get("toPorts")
    if not to_ports:
        return None
    out: list[PortRange] = []
    for pr in to_ports:
        ports = (pr or {}).get("ports") or ()
        if not ports:
            out.append((0, 0, "ANY"))
            continue
        for p in ports:
            proto = str(p.get("protocol") or "ANY").upper()
            raw = p.get("port")
            try:
                lo = int(str(raw)) if raw not in (None, "") else 0
            except ValueError:
                continue  # named ports are not modelled: they match nothing
            hi = int(p.get("endPort") or lo)
            out.append((lo, max(lo, hi), proto))
    return tuple(out)


def _peers(
    rule: Mapping[str, Any], endpoints: Mapping[str, Endpoint], namespace: str, direction: str
) -> frozenset[str]:
    ep_key, ent_key = (
        ("fromEndpoints", "fromEntities") if direction == "ingress" else ("toEndpoints", "toEntities")
    )
    l3_keys = (
        (
            "fromEndpoints",
            "fromEntities",
            "fromCIDR",
            "fromCIDRSet",
            "fromRequires",
            "fromGroups",
            "fromNodes",
        )
        if direction == "ingress"
        else (
            "toEndpoints",
            "toEntities",
            "toCIDR",
            "toCIDRSet",
            "toRequires",
            "toGroups",
            "toFQDNs",
            "toServices",
            "toNodes",
        )
    )
    if not any(rule.get(k) is not None for k in l3_keys):
        return ALL_PEERS
    peers: set[str] = set()
    for sel in rule.get(ep_key) or ():
        peers |= _select(endpoints, sel, namespace)
    entities = {str(e).lower() for e in rule.get(ent_key) or ()}
    if entities & _ALL_ENTITIES:
        return ALL_PEERS
    return frozenset(peers)


class PolicySet:
    """Compiled CiliumNetworkPolicies over a set of endpoints."""

    def __init__(self, policies: Iterable[Mapping[str, Any]], endpoints: Mapping[str, Endpoint]) -> None:
        self.ingress_allow: list[_Rule] = []
        self.ingress_deny: list[_Rule] = []
        self.egress_allow: list[_Rule] = []
        self.egress_deny: list[_Rule] = []
        self.default_deny_ingress: set[str] = set()
        self.default_deny_egress: set[str] = set()
        for pol in policies:
            meta = pol.get("metadata") or {}
            if "deletionTimestamp" in meta:
                continue
            ns = str(meta.get("namespace") or "default")
            specs = list(pol.get("specs") or ())
            if pol.get("spec"):
                specs.insert(0, pol["spec"])
            for spec in specs:
                self._add(spec or {}, ns, endpoints)

    def _add(self, spec: Mapping[str, Any], ns: str, endpoints: Mapping[str, Endpoint]) -> None:
        if "endpointSelector" not in spec:
            return  # nodeSelector policies (host firewall) do not select VM pods
        subject = frozenset(_select(endpoints, spec.get("endpointSelector"), ns))
        if not subject:
            return
        dd = spec.get("enableDefaultDeny") or {}
        for direction, allow_key, deny_key, allow, deny, dd_set in (
            (
                "ingress",
                "ingress",
                "ingressDeny",
                self.ingress_allow,
                self.ingress_deny,
                self.default_deny_ingress,
            ),
            ("egress", "egress", "egressDeny", self.egress_allow, self.egress_deny, self.default_deny_egress),
        ):
            allow_rules = list(spec.get(allow_key) or ())
            deny_rules = list(spec.get(deny_key) or ())
            for r in allow_rules:
                allow.append(_Rule(subject, _peers(r or {}, endpoints, ns, direction), _ports(r or {})))
            for r in deny_rules:
                deny.append(_Rule(subject, _peers(r or {}, endpoints, ns, direction), _ports(r or {})))
            has_rules = bool(allow_rules or deny_rules)
            if dd.get(direction, has_rules):
                dd_set.update(subject)

    def allowed(self, src: str, dst: str, port: int, proto: str = "TCP") -> bool:
        """May ``src`` open a connection to ``dst:port``? (egress at src and ingress at dst)"""
        for r in self.egress_deny:
            if src in r.subject and dst in r.peers and r.matches_port(port, proto):
                return False
        if src in self.default_deny_egress and not any(
            src in r.subject and dst in r.peers and r.matches_port(port, proto) for r in self.egress_allow
        ):
            return False
        for r in self.ingress_deny:
            if dst in r.subject and src in r.peers and r.matches_port(port, proto):
                return False
        return not (
            dst in self.default_deny_ingress
            and not any(
                dst in r.subject and src in r.peers and r.matches_port(port, proto)
                for r in self.ingress_allow
            )
        )

    @property
    def empty(self) -> bool:
        return not (
            self.ingress_deny or self.egress_deny or self.default_deny_ingress or self.default_deny_egress
        )


# ------------------------------------------------------------------------------- iptables


@dataclass(frozen=True, slots=True)
class IptablesOp:
    """One iptables command of a script. ``offset`` = seconds after the container started when it
    runs (the ``sleep``s before it)."""

    action: str  # add | delete | flush
    chain: str = "INPUT"
    peer_ip: str | None = None
    probability: float = 1.0
    protocol: str = "all"
    comment: str | None = None
    offset: float = 0.0
    #: for ``delete``: remove the rules with one of these comments (else by number, else by spec)
    comments: tuple[str, ...] = ()
    rule_number: int | None = None


@dataclass(frozen=True, slots=True)
class LossRule:
    """An active packet-drop rule on ``node`` (a VM name)."""

    node: str
    chain: str
    peer: str | None  # VM name; None = every peer
    probability: float
    protocol: str = "all"
    comment: str | None = None


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """iperf3 traffic between two VMs."""

    a: str
    b: str


_STATEMENT = re.compile(r"\biptables\b[^\n;|&)`]*")
_ASSIGN = re.compile(r"""^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=("([^"]*)"|'([^']*)'|([^\s;]*))""", re.M)
_SLEEP = re.compile(r"\bsleep\s+([0-9.]+[smhd]?)")
_GREP = re.compile(r"""\bgrep\b(?:\s+-[A-Za-z]+)*\s+("([^"]*)"|'([^']*)'|([^\s|;)]+))""")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_TIMEOUT = re.compile(r"\btimeout\s+(?:-[a-zA-Z]+\s+)*([0-9.]+[smhd]?)\b")
_IPERF_CLIENT = re.compile(r"\biperf3\b[^\n;|&]*?\s-c\s+([0-9A-Za-z.:-]+)")


def _variables(script: str, env: Mapping[str, str]) -> dict[str, str]:
    out = dict(env)
    for m in _ASSIGN.finditer(script):
        value = next((g for g in (m.group(3), m.group(4), m.group(5)) if g is not None), "")
        out[m.group(1)] = _substitute(value, out)
    return out


def _substitute(text: str, variables: Mapping[str, str]) -> str:
    return _VAR.sub(lambda m: variables.get(m.group(1) or m.group(2), m.group(0)), text)


def _sleep_seconds(arg: str) -> float:
    unit = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}.get(arg[-1:], 1.0)
    num = arg[:-1] if arg[-1:] in "smhd" else arg
    try:
        return float(num) * unit
    except ValueError:
        return 0.0


def parse_iptables(script: str, env: Mapping[str, str] | None = None) -> list[IptablesOp]:
    """The iptables rule changes a container script makes (see the module docstring)."""
    if "iptables" not in script:
        return []
    variables = _variables(script, env or {})
    sleeps = [(m.start(), _sleep_seconds(m.group(1))) for m in _SLEEP.finditer(script)]
    grep_patterns = []
    for m in _GREP.finditer(script):
        pat = next((g for g in (m.group(2), m.group(3), m.group(4)) if g is not None), "")
        pat = _substitute(pat, variables)
        if pat and not pat.startswith("$"):
            grep_patterns.append(pat)
    ops: list[IptablesOp] = []
    for m in _STATEMENT.finditer(script):
        offset = sum(d for pos, d in sleeps if pos < m.start())
        text = _substitute(m.group(0), variables)
        try:
            argv = shlex.split(text)
        except ValueError:
            argv = text.split()
        op = _parse_argv(argv[1:], offset, tuple(dict.fromkeys(grep_patterns)))
        if op is not None:
            ops.append(op)
    return ops


def _parse_argv(args: Sequence[str], offset: float, grep_patterns: tuple[str, ...]) -> IptablesOp | None:
    action: str | None = None
    chain = "INPUT"
    peer: str | None = None
    prob = 1.0
    proto = "all"
    comment: str | None = None
    target: str | None = None
    number: int | None = None
    has_spec = False
    i = 0
    n = len(args)
    while i < n:
        a = args[i]
        nxt = args[i + 1] if i + 1 < n else ""
        if a in ("-A", "--append", "-I", "--insert"):
            action, chain = "add", nxt or "INPUT"
            i += 2
            if a in ("-I", "--insert") and i < n and args[i].isdigit():
                i += 1
            continue
        if a in ("-D", "--delete"):
            action, chain = "delete", nxt or "INPUT"
            i += 2
            if i < n and args[i].isdigit():
                number = int(args[i])
                i += 1
            continue
        if a in ("-F", "--flush"):
            action = "flush"
            chain = nxt if nxt and not nxt.startswith("-") else ""
            i += 2 if chain else 1
            continue
        if a in ("-s", "--source", "--src"):
            if chain != "OUTPUT":
                peer = nxt.split("/")[0]
            has_spec = True
        elif a in ("-d", "--destination", "--dst"):
            if chain == "OUTPUT":
                peer = nxt.split("/")[0]
            has_spec = True
        elif a == "--probability":
            try:
                prob = min(1.0, max(0.0, float(nxt)))
            except ValueError:
                prob = 1.0
            has_spec = True
        elif a in ("-p", "--protocol"):
            proto = nxt.lower()
            has_spec = True
        elif a == "--comment":
            comment = nxt
        elif a in ("-j", "--jump"):
            target = nxt.upper()
            has_spec = True
        else:
            i += 1
            continue
        i += 2
    if action is None or chain not in ("INPUT", "OUTPUT", ""):
        return None
    if action == "add":
        if target not in ("DROP", "REJECT"):
            return None
        return IptablesOp("add", chain, peer, prob, proto, comment, offset)
    if action == "delete":
        comments: tuple[str, ...] = (comment,) if comment else ()
        if not has_spec and not comments and number is None:
            comments = grep_patterns  # `iptables -D INPUT $(... | grep -F "$COMMENT" ...)`
        if not has_spec and not comments and number is None:
            return None
        return IptablesOp("delete", chain, peer, prob, proto, comment, offset, comments, number)
    return IptablesOp("flush", chain or "", offset=offset)


def parse_iperf(script: str, env: Mapping[str, str] | None = None) -> list[tuple[str, float]]:
    """iperf3 clients a script runs: ``(target ip, seconds)`` (``timeout N`` bounds the run)."""
    if "iperf3" not in script:
        return []
    variables = _variables(script, env or {})
    text = _substitute(script, variables)
    duration = 0.0
    m = _TIMEOUT.search(text)
    if m:
        try:
            duration = parse_go_duration(m.group(1)) if m.group(1)[-1:] in "smh" else float(m.group(1))
        except ValueError:
            duration = 0.0
        if m.group(1)[-1:] == "d":
            duration = _sleep_seconds(m.group(1))
    return [(ip, duration) for ip in dict.fromkeys(x.group(1) for x in _IPERF_CLIENT.finditer(text))]


# ------------------------------------------------------------------------------- the model


@dataclass
class NetworkModel:
    """Connectivity of the VMs at one moment. ``online`` = VMs whose guest is running."""

    online: frozenset[str]
    policies: PolicySet
    loss_rules: Sequence[LossRule] = ()
    loads: Sequence[LoadSpec] = ()
    break_threshold: float = 0.3
    loss_slowdown: float = 10.0
    load_slowdown: float = 1.5
    _loss: dict[tuple[str, str], float] = field(default_factory=dict, init=False)
    _loaded: set[tuple[str, str]] = field(default_factory=set, init=False)
    _cache: dict[tuple[str, str, int], bool] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        keep: dict[tuple[str, str], float] = {}
        for r in self.loss_rules:
            if r.protocol not in ("all", "tcp", "6"):
                continue
            # INPUT on node with source peer: packets peer -> node; OUTPUT: node -> peer
            src, dst = (r.peer, r.node) if r.chain == "INPUT" else (r.node, r.peer)
            if src is None or dst is None:
                continue  # per-peer rules are expanded by the caller
            k = (src, dst) if src < dst else (dst, src)
            keep[k] = 1.0 - (1.0 - keep.get(k, 0.0)) * (1.0 - r.probability)
        self._loss = keep
        self._loaded = {(ld.a, ld.b) if ld.a < ld.b else (ld.b, ld.a) for ld in self.loads}

    def loss(self, a: str, b: str) -> float:
        """Combined packet loss on the link a<->b (both directions)."""
        return self._loss.get((a, b) if a < b else (b, a), 0.0)

    def loaded(self, a: str, b: str) -> bool:
        return ((a, b) if a < b else (b, a)) in self._loaded

    def link(self, a: str, b: str, port: int) -> bool:
        """Can the DRBD connection a<->b on ``port`` be up?"""
        if a == b:
            return a in self.online
        key = (a, b, port) if a < b else (b, a, port)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        up = (
            a in self.online
            and b in self.online
            and self.loss(a, b) < self.break_threshold
            and (self.policies.allowed(a, b, port) or self.policies.allowed(b, a, port))
        )
        self._cache[key] = up
        return up

    def slowdown(self, a: str, b: str) -> float:
        """How much longer a transfer over a<->b takes (loss below the threshold, load)."""
        f = 1.0 + self.loss(a, b) * self.loss_slowdown
        if self.loaded(a, b):
            f *= self.load_slowdown
        return f

    def node_slowdown(self, node: str) -> float:
        f = 1.0
        for (a, b), p in self._loss.items():
            if node in (a, b):
                f = max(f, 1.0 + p * self.loss_slowdown)
        if any(node in pair for pair in self._loaded):
            f *= self.load_slowdown
        return f

    def describe(self) -> dict[str, Any]:
        """A JSON-friendly summary (for logs and tests)."""
        return {
            "online": sorted(self.online),
            "loss": {f"{a}<->{b}": round(p, 6) for (a, b), p in sorted(self._loss.items())},
            "load": [f"{a}<->{b}" for a, b in sorted(self._loaded)],
            "policies": not self.policies.empty,
        }


def expand_rules(rules: Iterable[LossRule], vms: Iterable[str]) -> list[LossRule]:
    """Rules without a peer apply to every other VM: expand them per peer."""
    names = sorted(vms)
    out: list[LossRule] = []
    for r in rules:
        if r.peer is not None:
            out.append(r)
            continue
        out.extend(
            LossRule(r.node, r.chain, vm, r.probability, r.protocol, r.comment)
            for vm in names
            if vm != r.node
        )
    return out
