/**
 * Neutralising the repository's own program-running config, for every git command the runner
 * starts (GitService, and WorkspaceService's recover and network paths). SAFE_GIT_CONFIG
 * (src/services/workspaces.ts) covers the settings with fixed names; this covers the ones whose
 * names the repository chooses.
 */

/**
 * Bash preamble: the repository's filter drivers (clean, smudge, process, required), diff drivers
 * (textconv, command) and merge drivers are read with `git config` (which runs nothing) and
 * overridden with empty values through GIT_CONFIG_COUNT, so no git command after it runs them.
 * Outside a repository it finds nothing and changes nothing.
 */
export const NEUTRALISE_REPO_DRIVERS =
  `__n=\${GIT_CONFIG_COUNT:-0}; while IFS= read -r -d '' __k; do export "GIT_CONFIG_KEY_$__n=$__k" "GIT_CONFIG_VALUE_$__n="; __n=$((__n+1)); done ` +
  `< <(git config -z --includes --name-only --get-regexp '^(filter\\..*\\.(clean|smudge|process|required)|diff\\..*\\.(textconv|command)|merge\\..*\\.driver)$' 2>/dev/null); export GIT_CONFIG_COUNT=$__n; unset __n __k; `;
