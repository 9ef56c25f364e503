/**
 * The URIs of the MCP surfaces beside the tools (src/mcp/resources.ts, src/mcp/skills-ext.ts):
 * what Atelier makes parses back to the same file, and every hostile spelling is refused naming the
 * rule (the e2e test, test/e2e/resources.test.ts, drives the same through the real service).
 */
import { describe, expect, it } from 'vitest';
import { fileUri, parseFileUri, resourceLinks, MAX_LINKS } from '../../src/mcp/resources.js';
import { parseSkillUri, skillFileUri, skillRoot } from '../../src/mcp/skills-ext.js';
import { ServiceError } from '../../src/core/errors.js';

const WS = 'ws_abcdefghijklmnopqrstuvwx';

function refused(f: () => unknown): { message: string; rule: unknown } {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(ServiceError);
    return { message: (e as ServiceError).message, rule: (e as ServiceError).details.rule };
  }
  throw new Error('not refused');
}

describe('file URIs', () => {
  it('round-trip any file name, percent-encoded segment by segment', () => {
    for (const path of ['README.md', 'docs/a b#c?.md', 'src/ünï/cödé 🙂.ts', "x/!~*'()/%41", 'a/b/c/d/e/f']) {
      const uri = fileUri(WS, path);
      expect(uri).toMatch(/^atelier:\/\/workspaces\/ws_[A-Za-z0-9_-]+\/files\/[A-Za-z0-9%._~!*'()/-]+$/);
      expect(parseFileUri(uri)).toEqual({ workspaceId: WS, path, base: uri });
    }
    expect(fileUri(WS, './src//a.ts')).toBe(`atelier://workspaces/${WS}/files/src/a.ts`);
  });

  it('reads a range from the query, in either order, and refuses anything else in it', () => {
    expect(parseFileUri(`${fileUri(WS, 'a')}?length=10&offset=5`).range).toEqual({ offset: 5, length: 10 });
    expect(parseFileUri(`${fileUri(WS, 'a')}?offset=7`).range).toEqual({ offset: 7, length: 1048576 });
    expect(refused(() => parseFileUri(`${fileUri(WS, 'a')}?offset=1&offset=2`)).message).toMatch(/offset given twice/);
    expect(refused(() => parseFileUri(`${fileUri(WS, 'a')}?length=0`)).message).toMatch(/length must be 1-1048576/);
    expect(refused(() => parseFileUri(`${fileUri(WS, 'a')}?offset=-1`)).message).toMatch(/whole number/);
    expect(refused(() => parseFileUri(`${fileUri(WS, 'a')}?offset=1e3`)).message).toMatch(/whole number/);
    expect(refused(() => parseFileUri(`${fileUri(WS, 'a')}?x=1`)).message).toMatch(/unknown parameter "x"/);
  });

  it('refuses traversal however spelled, NUL, encoded slashes, bad escapes, fragments and over-long paths', () => {
    const base = `atelier://workspaces/${WS}/files`;
    for (const p of ['../x', 'a/../b', '%2e%2e/x', 'a/%2E%2e/b', './x', 'a//b', 'a/%2e']) expect(refused(() => parseFileUri(`${base}/${p}`)).rule, p).toBe('no empty, . or .. segments');
    expect(refused(() => parseFileUri(`${base}/a%00b`)).rule).toBe('no NUL');
    expect(refused(() => parseFileUri(`${base}/a%2Fb`)).rule).toBe('no encoded slash');
    expect(refused(() => parseFileUri(`${base}/a%zzb`)).rule).toBe('percent-encoding');
    expect(refused(() => parseFileUri(`${base}/a#b`)).rule).toBe('no fragment');
    expect(refused(() => parseFileUri(`${base}/${'x'.repeat(1025)}`)).message).toMatch(/longer than 1024 characters/);
    expect(parseFileUri(`${base}/${'x'.repeat(1024)}`).path).toHaveLength(1024);
    expect(refused(() => parseFileUri(`${base}/${'%41'.repeat(6000)}`)).message).toMatch(/longer than 16384/);
    expect(refused(() => parseFileUri(`atelier://workspaces/../files/x`)).rule).toBe('no empty, . or .. segments');
    expect(refused(() => parseFileUri(`atelier://workspaces/ws_short/files/x`)).rule).toBe('workspace identifier');
    expect(refused(() => parseFileUri(`atelier://workspaces/${WS}/other/x`)).message).toMatch(/atelier:\/\/workspaces\/\{workspaceId\}\/files\/\{\+path\}/);
    expect(refused(() => parseFileUri(`atelier://workspaces/${WS}/files`)).message).toMatch(/\{\+path\}/);
  });
});

describe('directory URIs', () => {
  it('name the checkout root without a path, take no query, and refuse what a file URI refuses', () => {
    expect(parseFileUri(`atelier://workspaces/${WS}/files`, true)).toMatchObject({ workspaceId: WS, path: '.' });
    expect(parseFileUri(fileUri(WS, 'src/a b'), true)).toMatchObject({ path: 'src/a b' });
    expect(refused(() => parseFileUri(`atelier://workspaces/${WS}/files`)).message).toMatch(/\{\+path\}/);
    expect(refused(() => parseFileUri(`${fileUri(WS, 'src')}?offset=1`, true)).rule).toBe('no query');
    expect(refused(() => parseFileUri(`${fileUri(WS, 'src')}/`, true)).rule).toBe('no empty, . or .. segments');
    expect(refused(() => parseFileUri(`${fileUri(WS, 'src')}/..`, true)).rule).toBe('no empty, . or .. segments');
    expect(parseSkillUri(`skill://repository/${WS}/x`, true)).toEqual({ source: 'repository', workspaceId: WS, name: 'x', file: '' });
    expect(parseSkillUri('skill://owner/x/references', true)).toMatchObject({ file: 'references' });
    expect(refused(() => parseSkillUri('skill://owner/x/%2e%2e', true)).rule).toBe('no empty, . or .. segments');
  });
});

describe('skill URIs', () => {
  it('name the source first, the workspace for checkout skills, then the skill and its file', () => {
    expect(skillRoot('owner', null, 'notes')).toBe('skill://owner/notes');
    expect(skillRoot('built-in', WS, 'atelier-review-changes')).toBe('skill://built-in/atelier-review-changes');
    expect(skillRoot('repository', WS, 'a:b')).toBe(`skill://repository/${WS}/a%3Ab`);
    const uri = skillFileUri(skillRoot('workspace', WS, 'scratch'), 'references/a b.md');
    expect(uri).toBe(`skill://workspace/${WS}/scratch/references/a%20b.md`);
    expect(parseSkillUri(uri)).toEqual({ source: 'workspace', workspaceId: WS, name: 'scratch', file: 'references/a b.md' });
    expect(parseSkillUri('skill://owner/notes/SKILL.md')).toEqual({ source: 'owner', workspaceId: null, name: 'notes', file: 'SKILL.md' });
  });

  it('refuses what names nothing inside one skill', () => {
    expect(refused(() => parseSkillUri(`skill://repository/${WS}/x/../../y`)).rule).toBe('no empty, . or .. segments');
    expect(refused(() => parseSkillUri(`skill://repository/${WS}/x/%2e%2e/y`)).rule).toBe('no empty, . or .. segments');
    expect(refused(() => parseSkillUri(`skill://repository/${WS}/x`)).rule).toBe('file of a skill');
    expect(refused(() => parseSkillUri('skill://repository/x/SKILL.md')).rule).toBe('workspace identifier');
    expect(refused(() => parseSkillUri('skill://other/x/SKILL.md')).rule).toBe('skill source');
    expect(refused(() => parseSkillUri('skill://owner/x/SKILL.md?x')).rule).toBe('no query or fragment');
    expect(refused(() => parseSkillUri('skill://owner/x%20y/SKILL.md')).rule).toBe('skill name');
    expect(refused(() => parseSkillUri('skill://owner/x/a%00')).rule).toBe('no NUL');
  });
});

describe('resource links', () => {
  it('link regular files once each, in result order, at most MAX_LINKS', () => {
    const listed = resourceLinks('files_list', WS, { entries: [{ path: 'a.md', type: 'file', size: 3 }, { path: 'd', type: 'directory' }, { path: 'l', type: 'symlink' }, { path: 'logo.bin', type: 'file', size: 9 }] });
    // A MIME type only where the name tells it (files_list has not seen the bytes).
    expect(listed).toEqual([
      { type: 'resource_link', uri: fileUri(WS, 'a.md'), name: 'a.md', mimeType: 'text/markdown', size: 3 },
      { type: 'resource_link', uri: fileUri(WS, 'logo.bin'), name: 'logo.bin', size: 9 },
    ]);
    const grep = resourceLinks('grep_search', WS, { matches: [{ file: 'b.ts' }, { file: 'a.ts' }, { file: 'b.ts' }] });
    expect(grep.map((l) => [l.name, l.description])).toEqual([
      ['b.ts', '2 matching lines'],
      ['a.ts', '1 matching line'],
    ]);
    const many = resourceLinks('symbols_search', WS, { symbols: Array.from({ length: 300 }, (_, i) => ({ file: `f${i}.ts` })) });
    expect(many).toHaveLength(MAX_LINKS);
    expect(resourceLinks('files_list', undefined, { entries: [{ path: 'a', type: 'file' }] })).toEqual([]);
    expect(resourceLinks('files_read', WS, { path: 'a' })).toEqual([]);
  });
});
