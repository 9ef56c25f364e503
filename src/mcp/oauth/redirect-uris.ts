/**
 * The redirect URI rule of the authorization server, shared by dynamic registration (RFC 7591,
 * routes.ts) and Client ID Metadata Documents (cimd.ts): one rule however a client is known.
 */
const LOOPBACK_HOSTS = ['127.0.0.1', '[::1]', 'localhost'];

/**
 * Redirect URIs a client may register: https, http on a loopback host, or a native app's private-use
 * scheme named by a reverse domain (RFC 8252 section 7.1: `com.example.app:/callback`). Printable
 * ASCII only (a URI percent-encodes the rest, and a bidi override in one could disguise it on the
 * consent page), no fragment, no user or password. Anything else (`javascript:`, `data:`, a bare
 * `myapp:`, an OS handler such as `ms-settings:`) is refused.
 */
export function redirectUriProblem(u: string): string | null {
  if (u.length > 2000) return 'too long';
  if (!/^[\x21-\x7e]+$/.test(u)) return 'must be printable ASCII without spaces (percent-encode anything else)';
  let url: URL;
  try {
    url = new URL(u);
  } catch {
    return 'not an absolute URI';
  }
  if (u.includes('#')) return 'must not contain a fragment';
  if (url.username || url.password) return 'must not contain a user name or password';
  const scheme = url.protocol.slice(0, -1).toLowerCase();
  if (scheme === 'https') return url.hostname ? null : 'https needs a host';
  if (scheme === 'http') return LOOPBACK_HOSTS.includes(url.hostname) ? null : 'http is allowed only on a loopback host (127.0.0.1, [::1], localhost); use https';
  if (/^[a-z][a-z0-9-]*(\.[a-z0-9-]+)+$/.test(scheme)) return null;
  return `scheme ${scheme}: must be https, http on a loopback host, or a native app's reverse-domain private-use scheme such as com.example.app:/callback (RFC 8252)`;
}
