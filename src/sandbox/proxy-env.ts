/**
 * The variables that point a sandbox's package managers and git at its egress proxy, the same for
 * every driver: bubblewrap's bridge and the Kubernetes tunnel both listen on 127.0.0.1:3128 inside.
 */
export const SANDBOX_PROXY_PORT = 3128;
export const SANDBOX_PROXY_URL = `http://127.0.0.1:${SANDBOX_PROXY_PORT}`;

export const SANDBOX_PROXY_ENV: Readonly<Record<string, string>> = Object.freeze({
  HTTP_PROXY: SANDBOX_PROXY_URL,
  HTTPS_PROXY: SANDBOX_PROXY_URL,
  http_proxy: SANDBOX_PROXY_URL,
  https_proxy: SANDBOX_PROXY_URL,
  npm_config_proxy: SANDBOX_PROXY_URL,
  npm_config_https_proxy: SANDBOX_PROXY_URL,
  YARN_HTTP_PROXY: SANDBOX_PROXY_URL,
  YARN_HTTPS_PROXY: SANDBOX_PROXY_URL,
  NO_PROXY: 'localhost,127.0.0.1,::1',
  no_proxy: 'localhost,127.0.0.1,::1',
});
