/**
 * Skills and files where clients look for them (issue #32 item 4), through the real `atelier serve`
 * and the official clients (v2 on 2026-07-28, v1 on the 2025 era): the workspace's skills from all
 * four sources through the skills extension (SEP-2640, read and verified by the SDK's own
 * SkillsClient) and as prompts, workspace files as resources (text, binary, a large file in
 * ranges), resource_link items in files_list / grep_search / symbols_search results, all under a
 * read-only token; refused for a token without the toolset; hostile URIs refused.
 */
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { SkillsClient } from '@modelcontextprotocol/client/ext/skills';
import type { Client as ClientV1 } from '@modelcontextprotocol/sdk/client/index.js';
import { call, connectV1, dashboardLogin, httpRequest, runCli, type AnyClient, type Service } from './harness.js';
import { startGitHost, startWorkspaceService } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';

let host: GitHost;
let svc: Service;
let c: Client;
let v1: ClientV1;
let ws: string;
let readOnlyToken: string;
let dash: { cookie: string; csrf: string };

const sha = (b: Buffer | string): string => createHash('sha256').update(b).digest('hex');
const skillMd = (name: string, description: string, extra = '') => `---\nname: ${name}\ndescription: ${description}\n${extra}---\n# ${name}\n\nInstructions for ${name}.\n`;

const FIXTURE: Record<string, string> = {
  'README.md': '# resources fixture\n\nSee src/index.ts.\n',
  'src/index.ts': 'export function addNumbers(a: number, b: number) {\n  return a + b;\n}\n',
  'docs/a b#c?.md': 'a file whose name needs percent-encoding\n',
  // A repository skill with a reference and a script.
  '.agents/skills/repo-helper/SKILL.md': skillMd('repo-helper', 'Helps with this repository; read references/GUIDE.md first.', 'license: MIT\nmetadata:\n  author: fixture\n'),
  '.agents/skills/repo-helper/references/GUIDE.md': '# Guide\n\nStep one.\n',
  '.agents/skills/repo-helper/scripts/run.sh': '#!/bin/sh\necho run\n',
  // Usable by the tools but not to the letter of the Agent Skills format (name with capitals).
  '.agents/skills/Odd_Skill/SKILL.md': skillMd('Odd_Skill', 'A skill whose name breaks the Agent Skills naming rule.'),
  // Shadowed by the built-in skill of the same name.
  '.claude/skills/atelier-review-changes/SKILL.md': skillMd('atelier-review-changes', 'The repository review checklist (shadowed).'),
};

async function ok(name: string, args: Record<string, unknown>, client: AnyClient = c): Promise<Record<string, unknown>> {
  const r = await call(client, name, args);
  if (!r.ok) throw new Error(`${name} failed: ${r.text}`);
  return r.result;
}

async function sh(command: string): Promise<{ exitCode: number | null; stdout: string; stderr: string }> {
  return (await ok('exec_run', { workspaceId: ws, command, timeoutMs: 60_000 })) as never;
}

async function token(args: string[]): Promise<string> {
  const r = await runCli(['token', 'create', '--json', ...args, '--data-dir', svc.dataDir]);
  if (r.code !== 0) throw new Error(r.stderr);
  return JSON.parse(r.stdout).token as string;
}

/** The JSON-RPC error a request was answered with: its code, message and Atelier's error body. */
async function rpcFailure(p: Promise<unknown>): Promise<{ code: number; message: string; error?: { code: string; message: string; details: Record<string, unknown> } }> {
  try {
    await p;
  } catch (e) {
    const x = e as { code?: number; message: string; data?: { error?: { code: string; message: string; details: Record<string, unknown> } } };
    return { code: x.code ?? 0, message: x.message, error: x.data?.error };
  }
  throw new Error('the request unexpectedly succeeded');
}

/** The v2 client on the 2026-07-28 revision (pinned: its default is the 2025 handshake). */
async function connectV2(service: Service, bearer = service.token, headers: Record<string, string> = {}): Promise<Client> {
  const client = new Client({ name: 'atelier-e2e-modern', version: '1.0.0' }, { versionNegotiation: { mode: { pin: '2026-07-28' } } });
  await client.connect(new StreamableHTTPClientTransport(new URL(service.mcpUrl), { requestInit: { headers: { Authorization: `Bearer ${bearer}`, ...headers } } }));
  return client;
}

const fileUri = (path: string, workspaceId = ws) => `atelier://workspaces/${workspaceId}/files/${path.split('/').map(encodeURIComponent).join('/')}`;

beforeAll(async () => {
  host = await startGitHost();
  const repoUrl = (await host.createRepo('approved/resources', FIXTURE)).url;
  svc = await startWorkspaceService(host);
  c = await connectV2(svc);
  ws = (await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'resources-open-1' })).workspaceId as string;
  // A workspace skill, and an owner skill added on the dashboard: all four sources in the roster.
  await sh('mkdir -p .atelier/skills/scratch && printf -- "---\\nname: scratch\\ndescription: A scratch skill written in the workspace.\\n---\\nScratch body.\\n" > .atelier/skills/scratch/SKILL.md && ln -s /etc/passwd .atelier/skills/scratch/leak');
  dash = await dashboardLogin(svc);
  const put = await httpRequest(svc.url, 'PUT', '/api/v1/skills/owner-notes', { cookie: dash.cookie, 'x-csrf-token': dash.csrf, 'content-type': 'application/json' }, JSON.stringify({ files: { 'SKILL.md': skillMd('owner-notes', 'The owner house style for notes.'), 'scripts/hello.sh': '#!/bin/sh\necho hello\n' } }));
  expect(put.status).toBe(200);
  // Binary and large files, and links out of the checkout.
  await sh("printf 'GIF89a\\000\\001\\377\\376' > logo.bin && head -c 70000 /dev/urandom >> logo.bin");
  await sh("head -c 1700000 /dev/urandom | base64 -w 76 > big.txt && printf 'zwei – drei 🙂\\n' >> big.txt");
  await sh('ln -s /etc/passwd passwd-link && ln -s ../../../../../.. up-link');
  readOnlyToken = await token(['--name', 'ro', '--read-only']);
  v1 = await connectV1(svc, readOnlyToken);
}, 180_000);

afterAll(async () => {
  await c?.close();
  await v1?.close();
  await svc?.dispose();
  await host?.close();
});

type Listed = { name: string; source: string; location: string; active: boolean; sha256: string };

async function skillsListTool(): Promise<Listed[]> {
  const out: Listed[] = [];
  let cursor: string | undefined;
  do {
    const r = await ok('skills_list', { workspaceId: ws, includeShadowed: false, limit: 100, ...(cursor ? { cursor } : {}) });
    out.push(...(r.skills as Listed[]));
    cursor = (r.nextCursor as string | null) ?? undefined;
  } while (cursor);
  return out.filter((s) => s.active);
}

describe('capabilities', () => {
  it('declares resources, prompts and the skills extension, with listChanged false, to both eras', async () => {
    expect(c.getNegotiatedProtocolVersion()).toBe('2026-07-28');
    for (const caps of [c.getServerCapabilities(), v1.getServerCapabilities()]) {
      expect(caps?.resources).toEqual({ subscribe: false, listChanged: false });
      expect(caps?.prompts).toEqual({ listChanged: false });
      expect((caps as { extensions?: Record<string, unknown> }).extensions?.['io.modelcontextprotocol/skills']).toEqual({ directoryRead: true });
    }
  });
});

describe('skills through the skills extension (SEP-2640)', () => {
  it('lists the roster of every source with digests matching skills_list and skills_read, and every file reads and verifies (read-only token)', async () => {
    // A read-only token cannot set an active workspace; its lists follow the only open workspace.
    const ro = await connectV2(svc, readOnlyToken);
    const sc = new SkillsClient(ro);
    expect(sc.supported).toBe(true);
    const listing = await sc.list();
    expect(listing.invalid).toEqual([]);
    expect(listing).toMatchObject({ ttlMs: 0, cacheScope: 'private' });
    const tool = await skillsListTool();
    const bySource = (source: string, name: string) => listing.skills.find((s) => (s._meta?.['atelier/skill'] as { source: string }).source === source && s.frontmatter.name === name);
    const repo = bySource('repository', 'repo-helper')!;
    expect(repo.uri).toBe(`skill://repository/${ws}/repo-helper/SKILL.md`);
    expect(repo.frontmatter).toEqual({ name: 'repo-helper', description: 'Helps with this repository; read references/GUIDE.md first.', license: 'MIT', metadata: { author: 'fixture' } });
    expect(bySource('workspace', 'scratch')!.uri).toBe(`skill://workspace/${ws}/scratch/SKILL.md`);
    expect(bySource('owner', 'owner-notes')!.uri).toBe('skill://owner/owner-notes/SKILL.md');
    expect(bySource('built-in', 'atelier-review-changes')!.uri).toBe('skill://built-in/atelier-review-changes/SKILL.md');
    // The shadowed repository skill is not listed; the one that breaks the format is named as not served.
    expect(listing.skills.filter((s) => s.frontmatter.name === 'atelier-review-changes')).toHaveLength(1);
    expect(listing.skills.some((s) => s.frontmatter.name === 'Odd_Skill')).toBe(false);
    // Every listed skill: its digest is skills_list's, its files are skills_read's, each file verifies.
    expect(listing.skills.length).toBe(tool.filter((t) => t.name !== 'Odd_Skill').length);
    for (const entry of listing.skills) {
      const m = entry._meta!['atelier/skill'] as { source: string; sha256: string };
      const listed = tool.find((t) => t.name === entry.frontmatter.name && t.source === m.source)!;
      expect(m.sha256).toBe(listed.sha256);
      const read = await ok('skills_read', { workspaceId: ws, name: listed.name, source: listed.source }, ro);
      const files = read.files as Array<{ path: string; size: number; sha256: string }>;
      expect(entry.resources !== 'dynamic' && entry.resources.map((r) => [r.uri.slice(entry.uri.length - 'SKILL.md'.length), r.digest, r.size]).sort()).toEqual(
        files.map((f) => [f.path.split('/').map(encodeURIComponent).join('/'), `sha256:${f.sha256}`, f.size]).sort(),
      );
      for (const f of files) {
        const got = await sc.read(entry, f.path);
        expect(got.verified).toBe(true);
        expect(sha(Buffer.from(got.bytes))).toBe(f.sha256);
      }
      // skills/get answers the same entry.
      expect((await sc.get(entry.uri)).skill).toEqual(entry);
    }
    const md = await sc.read(repo);
    expect(md.body).toMatch(/Instructions for repo-helper/);
    // Its directories, from its own file list.
    const root = `skill://repository/${ws}/repo-helper`;
    expect((await sc.readDirectory(root)).resources).toEqual([
      { uri: `${root}/SKILL.md`, name: 'SKILL.md', mimeType: 'text/markdown', size: repo.resources !== 'dynamic' ? repo.resources.find((r) => r.uri.endsWith('/SKILL.md'))!.size : -1 },
      { uri: `${root}/references`, name: 'references', mimeType: 'inode/directory' },
      { uri: `${root}/scripts`, name: 'scripts', mimeType: 'inode/directory' },
    ]);
    expect((await sc.readDirectory(`${root}/references`)).resources).toEqual([{ uri: `${root}/references/GUIDE.md`, name: 'GUIDE.md', mimeType: 'text/markdown', size: Buffer.byteLength(FIXTURE['.agents/skills/repo-helper/references/GUIDE.md']!) }]);
    expect(await rpcFailure(sc.readDirectory(`${root}/SKILL.md`))).toMatchObject({ code: -32602, error: { code: 'INVALID_ARGUMENT', details: { rule: 'directory of a skill' } } });
    expect(await rpcFailure(sc.readDirectory(`${root}/nothing`))).toMatchObject({ code: -32602, error: { code: 'NOT_FOUND' } });
    // A shadowed skill is still served by its URI (listed or not), as skills_read serves it by source.
    const shadowed = await sc.get(`skill://repository/${ws}/atelier-review-changes/SKILL.md`);
    expect(shadowed.skill.frontmatter.description).toMatch(/shadowed/);
    // The skill that breaks the format: named in _meta, refused by skills/get, still a resource and a prompt.
    const raw = (await ro.request({ method: 'skills/list', params: {} } as never, z.looseObject({ skills: z.array(z.unknown()), _meta: z.record(z.string(), z.unknown()).optional() }) as never)) as { _meta?: Record<string, unknown> };
    expect(raw._meta?.['atelier/notServed']).toEqual([expect.objectContaining({ name: 'Odd_Skill', source: 'repository', problem: expect.stringMatching(/lowercase/) })]);
    const odd = await rpcFailure(sc.get(`skill://repository/${ws}/Odd_Skill/SKILL.md`));
    expect(odd).toMatchObject({ code: -32602, error: { code: 'FAILED_PRECONDITION', details: { field: 'uri' } } });
    expect((await ro.readResource({ uri: `skill://repository/${ws}/Odd_Skill/SKILL.md` })).contents[0]).toMatchObject({ mimeType: 'text/markdown', text: expect.stringMatching(/^---\nname: Odd_Skill/) });
    await ro.close();
  }, 180_000);

  it('a 2025-era client (v1) lists and gets the same skills with a plain request', async () => {
    const list = (await v1.request({ method: 'skills/list', params: {} }, z.looseObject({ skills: z.array(z.looseObject({ uri: z.string() })) }) as never)) as { skills: Array<{ uri: string }>; ttlMs?: number };
    expect(list.skills.map((s) => s.uri)).toContain(`skill://repository/${ws}/repo-helper/SKILL.md`);
    expect(list.ttlMs).toBeUndefined();
    const got = (await v1.request({ method: 'skills/get', params: { uri: `skill://repository/${ws}/repo-helper/SKILL.md` } }, z.looseObject({ skill: z.looseObject({ uri: z.string() }) }) as never)) as { skill: { uri: string } };
    expect(got.skill.uri).toBe(`skill://repository/${ws}/repo-helper/SKILL.md`);
    const file = await v1.readResource({ uri: `skill://repository/${ws}/repo-helper/references/GUIDE.md` });
    expect(file.contents[0]).toMatchObject({ mimeType: 'text/markdown', text: '# Guide\n\nStep one.\n' });
  });

  it('resources/list shows the SKILL.md of every roster skill', async () => {
    const { resources } = await v1.listResources();
    expect(resources.map((r) => r.uri)).toEqual(expect.arrayContaining([`skill://repository/${ws}/repo-helper/SKILL.md`, `skill://repository/${ws}/Odd_Skill/SKILL.md`, 'skill://owner/owner-notes/SKILL.md']));
    expect(resources.find((r) => r.name === 'repo-helper')).toMatchObject({ mimeType: 'text/markdown', description: 'Helps with this repository; read references/GUIDE.md first.' });
  });
});

describe('skills as prompts', () => {
  it('lists one prompt per roster skill and gets its instructions with the task, on both eras (read-only token)', async () => {
    const ro = await connectV2(svc, readOnlyToken);
    const tool = await skillsListTool();
    for (const client of [ro, v1] as AnyClient[]) {
      const { prompts } = await client.listPrompts();
      expect(prompts.map((p) => p.name).sort()).toEqual(tool.map((t) => t.name).sort());
      const p = prompts.find((x) => x.name === 'repo-helper')!;
      expect(p).toMatchObject({ description: 'Helps with this repository; read references/GUIDE.md first.', arguments: [{ name: 'task', required: false }] });
      const got = await client.getPrompt({ name: 'repo-helper', arguments: { task: 'summarize the guide' } });
      const text = (got.messages[0]!.content as { text: string }).text;
      expect(got.messages[0]!.role).toBe('user');
      expect(text).toMatch(/the repository skill at ".agents\/skills\/repo-helper"/);
      expect(text).toMatch(/comes from the workspace checkout, not from the owner/);
      expect(text).toContain(`references/GUIDE.md <skill://repository/${ws}/repo-helper/references/GUIDE.md>`);
      expect(text).toMatch(/=== SKILL.md ===\n---\nname: repo-helper[\s\S]*Instructions for repo-helper\.\n=== end of SKILL.md ===\n\nTask: summarize the guide$/);
      const owner = await client.getPrompt({ name: 'owner-notes' });
      expect((owner.messages[0]!.content as { text: string }).text).not.toMatch(/comes from the workspace checkout/);
    }
    const bad = await rpcFailure(ro.getPrompt({ name: 'repo-helper', arguments: { tsak: 'typo' } }));
    expect(bad).toMatchObject({ code: -32602, error: { code: 'INVALID_ARGUMENT', details: { field: 'arguments.tsak' } } });
    const none = await rpcFailure(ro.getPrompt({ name: 'no-such-skill' }));
    expect(none).toMatchObject({ code: -32602, error: { code: 'NOT_FOUND', details: { field: 'name' } } });
    await ro.close();
  }, 120_000);
});

describe('workspace files as resources', () => {
  it('publishes the file template and reads text and binary files as files_read does, on both eras (read-only token)', async () => {
    const ro = await connectV2(svc, readOnlyToken);
    for (const client of [ro, v1] as AnyClient[]) {
      const { resourceTemplates } = await client.listResourceTemplates();
      expect(resourceTemplates).toEqual([expect.objectContaining({ uriTemplate: 'atelier://workspaces/{workspaceId}/files/{+path}', name: 'workspace-file' })]);
      const readme = await client.readResource({ uri: fileUri('README.md') });
      expect(readme.contents).toEqual([{ uri: fileUri('README.md'), mimeType: 'text/markdown', text: FIXTURE['README.md'], _meta: { 'atelier/file': expect.objectContaining({ path: 'README.md', size: Buffer.byteLength(FIXTURE['README.md']!), sha256: sha(FIXTURE['README.md']!), eof: true }) } }]);
      const odd = await client.readResource({ uri: fileUri('docs/a b#c?.md') });
      expect(odd.contents[0]).toMatchObject({ text: FIXTURE['docs/a b#c?.md'] });
      const bin = await client.readResource({ uri: fileUri('logo.bin') });
      const want = (await sh('sha256sum logo.bin')).stdout.split(' ')[0];
      const item = bin.contents[0] as { blob?: string; mimeType?: string; text?: string };
      expect(item.text).toBeUndefined();
      expect(item.mimeType).toBe('application/octet-stream');
      expect(sha(Buffer.from(item.blob!, 'base64'))).toBe(want);
    }
    const cached = (await ro.listResourceTemplates()) as { ttlMs?: number; cacheScope?: string };
    expect(cached).toMatchObject({ ttlMs: 3_600_000, cacheScope: 'private' });
    const read = (await ro.readResource({ uri: fileUri('README.md') })) as { ttlMs?: number; cacheScope?: string };
    expect(read).toMatchObject({ ttlMs: 0, cacheScope: 'private' });
    await ro.close();
  }, 120_000);

  it('lists workspace directories with resources/directory/read, a page at a time (read-only token)', async () => {
    await sh('mkdir -p many && cd many && touch $(seq -f f%03g 1 450) && mkfifo pipe');
    const ro = await connectV2(svc, readOnlyToken);
    const sc = new SkillsClient(ro);
    const top = await sc.readDirectory(`atelier://workspaces/${ws}/files`);
    expect(top).toMatchObject({ ttlMs: 0, cacheScope: 'private' });
    expect(top.resources).toEqual(
      expect.arrayContaining([
        { uri: fileUri('README.md'), name: 'README.md', mimeType: 'text/markdown', size: Buffer.byteLength(FIXTURE['README.md']!) },
        { uri: fileUri('src'), name: 'src', mimeType: 'inode/directory' },
        { uri: fileUri('passwd-link'), name: 'passwd-link' },
      ]),
    );
    // 450 files and a fifo: every file over three pages (the client walks the cursors), the fifo left out.
    const many = await sc.readDirectory(fileUri('many'));
    expect(many.resources.map((r) => r.name)).toEqual(Array.from({ length: 450 }, (_, i) => `f${String(i + 1).padStart(3, '0')}`));
    const first = (await ro.request({ method: 'resources/directory/read', params: { uri: fileUri('many') } } as never, z.looseObject({ resources: z.array(z.unknown()), nextCursor: z.string().optional() }) as never)) as { resources: unknown[]; nextCursor?: string };
    expect(first.resources).toHaveLength(200);
    expect(first.nextCursor).toBeTruthy();
    const wrong = await rpcFailure(ro.request({ method: 'resources/directory/read', params: { uri: fileUri('src'), cursor: first.nextCursor } } as never, z.looseObject({}) as never));
    expect(wrong).toMatchObject({ code: -32602, error: { code: 'INVALID_ARGUMENT', details: { field: 'cursor' } } });
    expect(await rpcFailure(sc.readDirectory(fileUri('README.md')))).toMatchObject({ code: -32602, error: { code: 'FAILED_PRECONDITION' } });
    expect(await rpcFailure(sc.readDirectory(fileUri('up-link')))).toMatchObject({ code: -32602, error: { code: 'PERMISSION_DENIED' } });
    expect(await rpcFailure(sc.readDirectory(`${fileUri('src')}/../..`))).toMatchObject({ code: -32602, error: { code: 'INVALID_ARGUMENT' } });
    await sh('rm -rf many');
    await ro.close();
  }, 120_000);

  it('reads a large file in ranges: the first range names itself, and the ranges put together are the file', async () => {
    const whole = await ok('files_read', { workspaceId: ws, path: 'big.txt', limit: 1 });
    const size = whole.size as number;
    expect(size).toBeGreaterThan(2 * 1048576);
    const first = await v1.readResource({ uri: fileUri('big.txt') });
    const c0 = first.contents[0] as { uri: string; text: string; _meta: Record<string, { offset: number; length: number; eof: boolean; nextUri?: string; size: number }> };
    expect(c0.uri).toBe(`${fileUri('big.txt')}?offset=0&length=1048576`);
    expect(c0._meta['atelier/file']).toMatchObject({ offset: 0, length: 1048576, eof: false, size, nextUri: `${fileUri('big.txt')}?offset=1048576&length=1048576` });
    const parts: Buffer[] = [Buffer.from(c0.text)];
    let next = c0._meta['atelier/file']!.nextUri;
    while (next) {
      const r = (await c.readResource({ uri: next })).contents[0] as { uri: string; text: string; _meta: Record<string, { eof: boolean; nextUri?: string; offset: number; length: number }> };
      const m = r._meta['atelier/file']!;
      expect(r.uri).toBe(`${fileUri('big.txt')}?offset=${m.offset}&length=${m.length}`);
      parts.push(Buffer.from(r.text));
      next = m.nextUri;
    }
    expect(sha(Buffer.concat(parts))).toBe(whole.sha256);
    // A range given explicitly: exactly those bytes.
    const mid = (await c.readResource({ uri: `${fileUri('big.txt')}?length=10&offset=100` })).contents[0] as { text: string };
    expect(mid.text).toBe(Buffer.concat(parts).subarray(100, 110).toString());
  }, 120_000);

  it('files_list, grep_search and symbols_search results carry resource_link items that resources/read resolves; structuredContent is unchanged (read-only token)', async () => {
    const ro = await connectV2(svc, readOnlyToken);
    const links = async (name: string, args: Record<string, unknown>) => {
      const r = (await ro.callTool({ name, arguments: { workspaceId: ws, ...args } })) as { content: Array<Record<string, unknown>>; structuredContent?: Record<string, unknown> };
      expect(r.content[0]!.type).toBe('text');
      expect(JSON.parse(r.content[0]!.text as string)).toEqual(r.structuredContent);
      expect(Object.keys(r.structuredContent!)).not.toContain('links');
      return r.content.filter((x) => x.type === 'resource_link') as Array<{ uri: string; name: string; size?: number; description?: string }>;
    };
    const listed = await links('files_list', { path: '.' });
    expect(listed.find((l) => l.name === 'README.md')).toMatchObject({ uri: fileUri('README.md'), size: Buffer.byteLength(FIXTURE['README.md']!) });
    // Directories and symlinks are not linked.
    expect(listed.some((l) => ['src', 'passwd-link', 'up-link'].includes(l.name))).toBe(false);
    const grep = await links('grep_search', { pattern: 'addNumbers', path: '.' });
    expect(grep).toEqual([expect.objectContaining({ uri: fileUri('src/index.ts'), name: 'src/index.ts', description: '1 matching line' })]);
    const symbols = await links('symbols_search', { query: 'addNumbers', path: '.' });
    expect(symbols).toEqual([expect.objectContaining({ uri: fileUri('src/index.ts'), description: '1 symbol' })]);
    for (const l of [...grep, ...symbols]) expect((await v1.readResource({ uri: l.uri })).contents[0]).toMatchObject({ text: FIXTURE['src/index.ts'] });
    // The 2025-era direct path carries them too.
    const r1 = (await v1.callTool({ name: 'grep_search', arguments: { workspaceId: ws, pattern: 'addNumbers' } })) as { content: Array<{ type: string; uri?: string }> };
    expect(r1.content.filter((x) => x.type === 'resource_link').map((x) => x.uri)).toEqual([fileUri('src/index.ts')]);
    await ro.close();
  }, 120_000);
});

describe('access', () => {
  it('a token without the files toolset sees no file template and is refused a file; one without extensions sees no prompts or skills and is refused them', async () => {
    const extOnly = await connectV2(svc, await token(['--name', 'ext', '--toolsets', 'workspace,extensions']));
    expect((await extOnly.listResourceTemplates()).resourceTemplates).toEqual([]);
    expect(await rpcFailure(new SkillsClient(extOnly).readDirectory(`atelier://workspaces/${ws}/files`))).toMatchObject({ code: -32602, error: { code: 'PERMISSION_DENIED', details: { tool: 'files_list' } } });
    const refused = await rpcFailure(extOnly.readResource({ uri: fileUri('README.md') }));
    expect(refused).toMatchObject({ code: -32602, error: { code: 'PERMISSION_DENIED', details: { tool: 'files_read', rule: 'toolset not granted' } } });
    expect(refused.message).toMatch(/toolset files/);
    expect((await extOnly.listPrompts()).prompts.length).toBeGreaterThan(0);
    await extOnly.close();

    const filesOnly = await connectV1(svc, await token(['--name', 'files', '--toolsets', 'workspace,files', '--read-only']));
    expect((await filesOnly.listPrompts()).prompts).toEqual([]);
    expect((await filesOnly.listResources()).resources).toEqual([]);
    const skills = (await filesOnly.request({ method: 'skills/list', params: {} }, z.looseObject({ skills: z.array(z.unknown()) }) as never)) as { skills: unknown[] };
    expect(skills.skills).toEqual([]);
    // Each refusal is taken as it comes (a rejection waiting for the loop to reach it is unhandled).
    const refusals = await Promise.all([
      filesOnly.getPrompt({ name: 'repo-helper' }),
      filesOnly.readResource({ uri: `skill://repository/${ws}/repo-helper/SKILL.md` }),
      filesOnly.request({ method: 'skills/get', params: { uri: `skill://repository/${ws}/repo-helper/SKILL.md` } }, z.looseObject({}) as never),
      filesOnly.request({ method: 'resources/directory/read', params: { uri: `skill://repository/${ws}/repo-helper` } }, z.looseObject({}) as never),
    ].map((p) => rpcFailure(p)));
    for (const f of refusals) expect(f).toMatchObject({ code: -32602, error: { code: 'PERMISSION_DENIED', details: { rule: 'toolset not granted' } } });
    expect((await filesOnly.readResource({ uri: fileUri('README.md') })).contents[0]).toMatchObject({ text: FIXTURE['README.md'] });
    await filesOnly.close();
    // Refusals are audited as refused tool calls are.
    for (const action of ['resources/read', 'prompts/get', 'skills/get', 'resources/directory/read']) {
      const audit = await httpRequest(svc.url, 'GET', `/api/v1/audit-log?outcome=refused&action=${encodeURIComponent(action)}`, { cookie: dash.cookie });
      const entries = JSON.parse(audit.body).entries as Array<{ actor: string; reason: string }>;
      expect(entries.length, action).toBeGreaterThan(0);
      expect(entries[0]).toMatchObject({ actor: 'mcp', reason: expect.stringMatching(/^PERMISSION_DENIED: /) });
    }

    // The connection's own narrowing header applies too.
    const narrowed = await connectV2(svc, svc.token, { 'X-MCP-Toolsets': 'files' });
    expect((await narrowed.listPrompts()).prompts).toEqual([]);
    await narrowed.close();
  }, 120_000);
});

describe('hostile resource URIs', () => {
  it('refuses traversal, encoded traversal, links out of the checkout, unknown workspaces, huge paths, NUL and files outside a skill, naming the rule', async () => {
    // A URI over the HTTP header limit cannot be sent on 2026-07-28 (it is mirrored in Mcp-Name): the 2025 era carries it in the body only.
    const refusedWith = async (uri: string, code: string, pattern: RegExp, client: AnyClient = uri.length > 8000 ? v1 : c) => {
      const f = await rpcFailure(client.readResource({ uri }));
      const shown = uri.slice(0, 160);
      expect(f.code, shown).toBe(-32602);
      expect(f.error?.code, `${shown}: ${f.message.slice(0, 300)}`).toBe(code);
      expect(f.message.slice(0, 300), shown).toMatch(pattern);
    };
    const base = `atelier://workspaces/${ws}/files`;
    await refusedWith(`${base}/../../../etc/passwd`, 'INVALID_ARGUMENT', /"\.\." path segments are not allowed/);
    await refusedWith(`${base}/src/%2e%2e/%2E%2E/etc/passwd`, 'INVALID_ARGUMENT', /"\.\." path segments are not allowed/);
    await refusedWith(`${base}/src%2F..%2F..%2Fetc/passwd`, 'INVALID_ARGUMENT', /encoded "\/"/);
    await refusedWith(`${base}//etc/passwd`, 'INVALID_ARGUMENT', /empty/);
    await refusedWith(`${base}/README.md%00.txt`, 'INVALID_ARGUMENT', /NUL/);
    await refusedWith(`${base}/${'a/'.repeat(600)}x`, 'INVALID_ARGUMENT', /longer than 1024 characters/);
    await refusedWith(`${base}/${'%41'.repeat(6000)}`, 'INVALID_ARGUMENT', /longer than 16384 characters/);
    // On 2026-07-28 the URI also travels in the Mcp-Name header: Node's header bound refuses it first.
    const status = await c.readResource({ uri: `${base}/${'%41'.repeat(6000)}` }).then(
      () => 0,
      (e: { data?: { status?: number } }) => e.data?.status,
    );
    expect(status).toBe(431);
    await refusedWith(`${base}/README.md?offset=0&length=99999999`, 'INVALID_ARGUMENT', /length must be 1-1048576/);
    await refusedWith(`${base}/README.md?path=/etc/passwd`, 'INVALID_ARGUMENT', /unknown parameter "path"/);
    await refusedWith(`${base}/README.md#x`, 'INVALID_ARGUMENT', /fragment/);
    // Links out of the checkout: the daemon's confinement, as files_read.
    await refusedWith(`${base}/passwd-link`, 'PERMISSION_DENIED', /outside|symlink|escape/i);
    await refusedWith(`${base}/up-link/etc/passwd`, 'PERMISSION_DENIED', /outside|symlink|escape/i);
    expect((await call(c, 'files_read', { workspaceId: ws, path: 'passwd-link' })).ok).toBe(false);
    // Workspaces that are not there, or not one.
    await refusedWith(fileUri('README.md', 'ws_AAAAAAAAAAAAAAAAAAAAAAAA'), 'NOT_FOUND', /no workspace ws_AAAAAAAAAAAAAAAAAAAAAAAA/);
    await refusedWith('atelier://workspaces/..%2F..%2Fetc/files/passwd', 'INVALID_ARGUMENT', /encoded "\/"|workspace identifier/);
    await refusedWith('file:///etc/passwd', 'NOT_FOUND', /no such resource/);
    // Skill URIs: only a file of the skill's own list.
    const skill = `skill://repository/${ws}/repo-helper`;
    await refusedWith(`${skill}/../../../README.md`, 'INVALID_ARGUMENT', /"\.\." path segments are not allowed/);
    await refusedWith(`${skill}/%2e%2e/%2e%2e/README.md`, 'INVALID_ARGUMENT', /"\.\." path segments are not allowed/);
    await refusedWith(`skill://workspace/${ws}/scratch/leak`, 'NOT_FOUND', /has no file "leak"/);
    await refusedWith(`${skill}/references`, 'INVALID_ARGUMENT', /is a directory of the skill, not a file; list it with resources\/directory\/read/);
    await refusedWith(`${skill}/references/NOPE.md`, 'NOT_FOUND', /has no file "references\/NOPE.md"/);
    await refusedWith(`skill://repository/ws_AAAAAAAAAAAAAAAAAAAAAAAA/repo-helper/SKILL.md`, 'NOT_FOUND', /no workspace/);
    await refusedWith(`skill://elsewhere/repo-helper/SKILL.md`, 'INVALID_ARGUMENT', /names the source/);
    await refusedWith(`skill://owner/no-such/SKILL.md`, 'NOT_FOUND', /no owner skill no-such/);
    await refusedWith(`${skill}/SKILL.md%00`, 'INVALID_ARGUMENT', /NUL/);
    const get = await rpcFailure(new SkillsClient(c).get(`${skill}/references/GUIDE.md`));
    expect(get).toMatchObject({ code: -32602, error: { code: 'INVALID_ARGUMENT', details: { field: 'uri' } } });
    // The service is still fine, and the checkout unchanged.
    expect((await c.readResource({ uri: fileUri('README.md') })).contents[0]).toMatchObject({ text: FIXTURE['README.md'] });
  }, 120_000);
});
