/**
 * Per-workspace egress proxy (the `dependency-access` network policy).
 *
 * The runner starts one proxy per workspace on the HOST, listening on a Unix socket that is
 * bind-mounted into the sandbox; the in-sandbox bridge (./daemon/bridge.ts) exposes it as
 * http://127.0.0.1:3128. The proxy speaks just enough HTTP/1.1 to accept one request per
 * connection:
 *
 *   - `CONNECT host:port` is the only thing that can succeed. In order:
 *       1. the authority is parsed and the host normalised (see normaliseHost below);
 *       2. the host is checked against the rules BEFORE any DNS lookup (an IP literal only
 *          matches a rule that names that exact IP; wildcards never match IPs);
 *       3. the port must be in a matching rule's ports (default [443]);
 *       4. the concurrent-tunnel cap is checked;
 *       5. the name is resolved on the host (opts.resolver, default dns.lookup all);
 *       6. if ANY resolved address is private (isPrivateAddress) the request is refused, unless a
 *          matching rule has allowPrivate;
 *       7. the proxy connects to the resolved addresses in order (the first that answers wins;
 *          it never resolves again, so there is no DNS-rebinding window), answers
 *          "HTTP/1.1 200 Connection Established" and pipes bytes both ways (half-close is
 *          propagated; a full close or error on either side destroys both).
 *     Steps 5 and 7 share one deadline (connectTimeoutMs, default 10 s) -> 504.
 *   - Any other request in absolute form (`GET http://host/...`) is refused with 403: only TLS
 *     through CONNECT leaves the sandbox. Anything unparseable is 400.
 *   - Every request that gets an answer produces exactly one EgressDecision (allowed or not, with
 *     a reason) through opts.onDecision; a connection that closes before sending a complete
 *     request header produces none.
 *
 * Status codes: 200 tunnel, 400 malformed, 403 policy refusal, 408 header timeout, 431 header
 * too large, 502 DNS/connect failure, 503 tunnel cap reached, 504 resolve/connect timeout.
 * Error answers carry a short text/plain body "atelier egress: <reason>" and the connection is
 * closed.
 *
 * Host normalisation (rules and requests alike): ASCII letters, digits, '-' and '.' only
 * (checked BEFORE lowercasing, so Unicode case folding such as the Kelvin sign cannot produce
 * an allowed name), lowercased, ONE trailing dot removed ("registry.npmjs.org." is the same
 * host as "registry.npmjs.org" and is resolved without the dot), labels of 1-63 characters not
 * starting or ending with '-', at most 253 characters. A name whose last label is numeric or
 * hex ("127.1", "2130706433", "example.0x7f") is refused as malformed: getaddrinfo would parse
 * it as an IPv4 address. Userinfo ("user@host"), ports out of 1-65535, zone ids ("fe80::1%eth0")
 * and anything else are malformed. IPv4 literals must be strict dotted decimal; IPv6 literals
 * must be bracketed in a CONNECT target and are compared by value (so "[::1]" and
 * "[0:0::1]" are the same host).
 *
 * Rule semantics: a rule grants (host, port); several rules may match one host and their grants
 * add up (allowed if any rule matching the host also lists the port; private addresses allowed if
 * any such rule has allowPrivate). "*.example.com" matches any name below example.com at any
 * depth, never example.com itself; a wildcard needs at least two labels after "*." ("*.com" is
 * rejected). Invalid rules make startEgressProxy/setRules throw (setRules then keeps the old
 * rules). setRules swaps a compiled snapshot: requests already being handled, and open tunnels,
 * keep the rules they started with.
 *
 * The code is split by part, each testable alone (test/unit/egress-policy.test.ts):
 *   egress/address.ts  IPv4/IPv6 literals and the private ranges
 *   egress/policy.ts   host normalisation, rules, the decisions before and after the lookup
 *   egress/http.ts     reading one request head, error answers
 *   egress/connect.ts  CONNECT: slot, lookup, address check, connect in order, the tunnel
 *   egress/server.ts   the Unix-socket server wiring (startEgressProxy)
 *   egress/workspace.ts  what workspaces need: the allow list from the config file, a proxy per
 *                      dependency-access workspace, the one-host proxy of a network git operation
 */
export { isPrivateAddress } from './egress/address.js';
export { DEFAULT_REGISTRY_RULES, type EgressRule } from './egress/policy.js';
export { startEgressProxy, type EgressDecision, type EgressProxy, type EgressProxyOptions } from './egress/server.js';
