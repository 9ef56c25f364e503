/**
 * The pure parts of repository extensions (src/services/extensions/format.ts, suggest.ts): SKILL.md
 * validation, the hook and deployment manifests and their digests, the local skill ranking and
 * prompt redaction. Everything that runs goes through the real service in test/e2e/extensions.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { canonical, parseDeployManifest, parseHookManifest, parseSkillMd, sha256, skillDigest } from '../../src/services/extensions/format.js';
import { hybridSuggestion, localSuggestion, redactPrompt, stem } from '../../src/services/extensions/suggest.js';

describe('SKILL.md', () => {
  it('reads the open format fields and reports problems without failing', () => {
    const m = parseSkillMd('---\nname: pdf-tools\ndescription: Extract PDFs.\nlicense: MIT\ncompatibility: needs poppler\nmetadata:\n  author: x\nallowed-tools:\n  - Read\n  - Bash(git:*)\n---\nbody\n', 'pdf-tools');
    expect(m).toMatchObject({ name: 'pdf-tools', description: 'Extract PDFs.', license: 'MIT', compatibility: 'needs poppler', metadata: { author: 'x' }, allowedTools: ['Read', 'Bash(git:*)'], usable: true, problems: [] });
    expect(m.body).toBe('body\n');
    const spaced = parseSkillMd('---\nname: a\ndescription: x\nallowed-tools: Read Write\n---\n', 'a');
    expect(spaced.allowedTools).toEqual(['Read', 'Write']);
  });

  it('is lenient where the client guide is, strict where a skill would be useless', () => {
    const colon = parseSkillMd('---\nname: a\ndescription: Use this when: the user asks\n---\n', 'a');
    expect(colon).toMatchObject({ usable: true, description: 'Use this when: the user asks' });
    expect(colon.problems.join()).toMatch(/read leniently/);
    const upper = parseSkillMd('---\nname: Big_Name\ndescription: x\n---\n', 'dir');
    expect(upper.usable).toBe(true);
    expect(upper.problems.join()).toMatch(/lowercase/);
    expect(upper.problems.join()).toMatch(/does not match its directory/);
    expect(parseSkillMd('no front matter', 'a')).toMatchObject({ usable: false });
    expect(parseSkillMd('---\nname: a\n---\n', 'a')).toMatchObject({ usable: false });
    expect(parseSkillMd('---\ndescription: x\n---\n', 'a')).toMatchObject({ usable: false });
    expect(parseSkillMd('---\nname: "a b/c"\ndescription: x\n---\n', 'a')).toMatchObject({ usable: false });
    expect(parseSkillMd('---\n- a\n- b\n---\n', 'a')).toMatchObject({ usable: false });
    const types = parseSkillMd('---\nname: a\ndescription: x\nmetadata: [1]\ncompatibility: ""\n---\n', 'a').problems.join();
    expect(types).toMatch(/metadata: must be a mapping/);
    expect(types).toMatch(/compatibility: must be a string of 1-500/);
    expect(parseSkillMd(`---\nname: a\ndescription: ${'d'.repeat(2000)}\n---\n`, 'a').description!.length).toBe(1024);
  });

  it('refuses alias bombs, duplicate keys and oversized front matter', () => {
    const bomb = '---\nname: a\ndescription: &x "l"\nb: &y [*x,*x,*x,*x,*x,*x,*x,*x,*x,*x,*x]\nc: [*y,*y,*y,*y,*y,*y,*y,*y,*y,*y]\n---\n';
    expect(parseSkillMd(bomb, 'a').usable).toBe(false);
    expect(parseSkillMd('---\nname: a\nname: b\ndescription: x\n---\n', 'a').usable).toBe(false);
    expect(parseSkillMd(`---\nname: a\ndescription: x\nz: "${'y'.repeat(70_000)}"\n---\n`, 'a').problems.join()).toMatch(/larger than/);
  });

  it('digests a skill over its sorted file list', () => {
    const a = skillDigest([{ path: 'b', size: 1, sha256: '1'.repeat(64) }, { path: 'a', size: 1, sha256: '2'.repeat(64) }]);
    expect(a).toBe(sha256(`${'2'.repeat(64)}  a\n${'1'.repeat(64)}  b\n`));
    expect(canonical({ b: 1, a: [1, { d: 2, c: undefined }] })).toBe('{"a":[1,{"d":2}],"b":1}');
  });
});

describe('manifests', () => {
  it('parses hooks and digests each definition', () => {
    const text = JSON.stringify({ version: 1, hooks: [{ name: 'lint', event: 'pre_commit', command: 'npm run lint' }] });
    const m = parseHookManifest(text);
    expect(m).toMatchObject({ sha256: sha256(text), problems: [], items: [{ name: 'lint', event: 'pre_commit', timeoutMs: 60000 }] });
    expect(m.items[0]!.sha256).toBe(sha256(canonical({ name: 'lint', event: 'pre_commit', command: 'npm run lint', timeoutMs: 60000 })));
  });

  it('makes a manifest with any bad entry unusable as a whole', () => {
    for (const bad of [
      '[',
      '[]',
      '{"hooks": {}}',
      JSON.stringify({ hooks: [{ name: 'a', event: 'manual', command: 'x' }, { name: 'a', event: 'manual', command: 'y' }] }),
      JSON.stringify({ hooks: [{ name: 'a', event: 'manual', command: 'x', timeoutMs: 99 }] }),
      JSON.stringify({ hooks: [{ name: 'a', event: 'manual', command: 'x', run: 'y' }] }),
      JSON.stringify({ hooks: [], extra: 1 }),
      '['.repeat(100_000) + ']'.repeat(100_000),
    ]) {
      const m = parseHookManifest(bad);
      expect(m.items, bad.slice(0, 80)).toEqual([]);
      expect(m.problems.length, bad.slice(0, 80)).toBeGreaterThan(0);
    }
  });

  it('parses deployment targets with their hosts and secrets', () => {
    const m = parseDeployManifest(JSON.stringify({ targets: [{ name: 'prod', command: './deploy.sh', egress: [{ host: 'API.example.com' }], secrets: ['B', 'A', 'A'] }] }));
    expect(m.items[0]).toMatchObject({ egress: [{ host: 'api.example.com', ports: [443] }], secrets: ['A', 'B'], timeoutMs: 60000 });
    for (const t of [
      { name: 'x', command: 'y', egress: [{ host: '*.example.com' }] },
      { name: 'x', command: 'y', egress: [{ host: 'a.com', ports: [0] }] },
      { name: 'x', command: 'y', egress: [{ host: 'a b' }] },
      { name: 'x', command: 'y', secrets: ['bad-name'] },
      { name: 'x', command: '' },
    ])
      expect(parseDeployManifest(JSON.stringify({ targets: [t] })).items).toEqual([]);
  });
});

describe('skill_suggest, locally', () => {
  const skills = [
    { name: 'pdf-tools', description: 'Extract text and tables from PDF documents, merge PDF files.' },
    { name: 'docker-compose', description: 'Write and debug Dockerfiles and docker compose files.' },
    { name: 'sql-migrations', description: 'Create database schema migrations for PostgreSQL.' },
  ];
  it('names the best match, or none when nothing fits or it is a tie', () => {
    expect(localSuggestion('merge these PDFs', skills).name).toBe('pdf-tools');
    expect(localSuggestion('add a migration to the database', skills).name).toBe('sql-migrations');
    expect(localSuggestion('the weather is nice', skills).name).toBeNull();
    expect(localSuggestion('', skills).name).toBeNull();
    expect(localSuggestion('pdf', []).name).toBeNull();
    expect(stem('migrations')).toBe('migration');
    expect(stem('building')).toBe('build');
  });

  it('fuses a semantic ranking when an embedding function is wired', async () => {
    // A stand-in embedding (concept buckets), enough to test the fusion and the threshold.
    const concepts = [['pdf', 'document', 'invoice', 'paper'], ['docker', 'container', 'image'], ['database', 'sql', 'schema', 'table', 'column']];
    const embed = async (texts: string[]) => texts.map((t) => concepts.map((c) => c.filter((w) => t.toLowerCase().includes(w)).length));
    const r = await hybridSuggestion('rename a column', skills, embed);
    expect(r.name).toBe('sql-migrations');
    expect(r.semantic[0]).toMatchObject({ name: 'sql-migrations' });
    expect((await hybridSuggestion('the weather is nice', skills, embed)).name).toBeNull();
    expect((await hybridSuggestion('merge these PDFs', skills, embed)).name).toBe('pdf-tools');
  });

  it('redacts secrets, keys and token-shaped strings', () => {
    const r = redactPrompt('use ghp_abcdefghijklmnop1234 and sk-abcdefghijklmnopqrstu with password=hunter2 at https://u:p@host/x and MYSECRETVALUE', (s) => s.replace('MYSECRETVALUE', '[redacted:X]'), ['KEYKEY']);
    expect(r.text).not.toMatch(/ghp_|sk-abc|hunter2|u:p@|MYSECRETVALUE/);
    expect(r.redactions).toBeGreaterThanOrEqual(5);
  });
});
