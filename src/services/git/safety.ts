/**
 * Neutralising the repository's own program-running config, for every git command the runner
 * starts (GitService, WorkspaceService's open and recover, and ephemeral git in
 * ephemeral.ts). SAFE_GIT_CONFIG covers the settings with fixed names (through
 * GIT_CONFIG_COUNT, gitConfigEnv); NEUTRALISE_REPO_DRIVERS covers the ones whose names the
 * repository chooses.
 */

/** Config applied to every git command the runner starts (through GIT_CONFIG_COUNT). */
export const SAFE_GIT_CONFIG: Array<[string, string]> = [
  ['core.hooksPath', '/dev/null'],
  ['core.fsmonitor', 'false'],
  ['core.sshCommand', '/bin/false'],
  ['core.askPass', ''],
  ['core.editor', '/bin/true'],
  ['core.pager', 'cat'],
  ['protocol.allow', 'never'],
  ['protocol.https.allow', 'always'],
  ['protocol.file.allow', 'never'],
  ['http.followRedirects', 'false'],
  ['credential.helper', ''],
  ['diff.external', ''],
  ['submodule.recurse', 'false'],
  ['uploadpack.packObjectsHook', ''],
  ['gc.auto', '0'],
  ['maintenance.auto', 'false'],
  ['safe.directory', '*'],
];

export function gitConfigEnv(extra: Array<[string, string]> = []): Record<string, string> {
  const all = [...SAFE_GIT_CONFIG, ...extra];
  const env: Record<string, string> = {
    GIT_CONFIG_NOSYSTEM: '1',
    GIT_CONFIG_GLOBAL: '/dev/null',
    GIT_TERMINAL_PROMPT: '0',
    GIT_CONFIG_COUNT: String(all.length),
  };
  all.forEach(([k, v], i) => {
    env[`GIT_CONFIG_KEY_${i}`] = k;
    env[`GIT_CONFIG_VALUE_${i}`] = v;
  });
  return env;
}

/**
 * Bash preamble: the repository's filter drivers (clean, smudge, process, required), diff drivers
 * (textconv, command) and merge drivers are read with `git config` (which runs nothing) and
 * overridden with empty values through GIT_CONFIG_COUNT, so no git command after it runs them.
 * Outside a repository it finds nothing and changes nothing.
 */
export const NEUTRALISE_REPO_DRIVERS =
  `__n=\${GIT_CONFIG_COUNT:-0}; while IFS= read -r -d '' __k; do export "GIT_CONFIG_KEY_$__n=$__k" "GIT_CONFIG_VALUE_$__n="; __n=$((__n+1)); done ` +
  `< <(git config -z --includes --name-only --get-regexp '^(filter\\..*\\.(clean|smudge|process|required)|diff\\..*\\.(textconv|command)|merge\\..*\\.driver)$' 2>/dev/null); export GIT_CONFIG_COUNT=$__n; unset __n __k; `;
