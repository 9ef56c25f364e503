/**
 * The fixture Kubernetes API server (test/fixtures/kube-apiserver/) checked by the real kubectl:
 * discovery, get, watch, exec (WebSocket, v5.channel.k8s.io as kubectl negotiates it; v4 by a
 * raw client), logs, and the status codes a real server answers (401, 404, 409, 410). Each Pod
 * is a bubblewrap sandbox, so this needs root and the compiled daemon (npx tsc -p .).
 */
import { execFile, spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { startKubeApiServer, type KubeApiServer } from '../fixtures/kube-apiserver/index.js';
import { assertDaemonBuilt, isRoot, kubectl, until } from './helpers.js';

const execFileP = promisify(execFile);
let api: KubeApiServer;

const kubectlFixture = (args: string[], input?: string) => kubectl(api.kubeconfig, args, input);

function manifest(name: string, obj: object): string {
  const file = path.join(path.dirname(api.kubeconfig), `${name}.json`);
  writeFileSync(file, JSON.stringify(obj));
  return file;
}

const workspacePod = (name: string, claim: string) => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name, labels: { app: 'atelier-workspace' } },
  spec: {
    containers: [
      {
        name: 'main',
        image: 'atelier-workspace:test',
        command: ['node', '/opt/atelier/daemon/main.js', '--socket', '/run/atelier/d.sock'],
        env: [{ name: 'GREETING', value: 'from-the-pod-spec' }],
        volumeMounts: [
          { name: 'data', mountPath: '/workspace', subPath: 'repo' },
          { name: 'data', mountPath: '/home/user', subPath: 'home' },
          { name: 'data', mountPath: '/tmp', subPath: 'tmp' },
        ],
      },
    ],
    volumes: [{ name: 'data', persistentVolumeClaim: { claimName: claim } }],
  },
});

describe.skipIf(!isRoot)('fixture Kubernetes API server, as kubectl sees it', () => {
  beforeAll(async () => {
    assertDaemonBuilt();
    api = await startKubeApiServer();
  });
  afterAll(async () => {
    await api?.close();
  });

  it('serves discovery and an empty pod list', async () => {
    const r = await kubectlFixture(['get', 'pods']);
    expect(r.stderr).toContain('No resources found in default namespace');
    expect(r.code).toBe(0);
  });

  it('refuses a client without the bearer token (401)', async () => {
    const r = await kubectlFixture(['--token', 'wrong', 'get', 'pods']);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/Unauthorized|must be logged in/);
  });

  it('creates a claim and a workspace pod that runs; 409 on a second create; 404 for an unknown pod', async () => {
    const claim = manifest('pvc', { apiVersion: 'v1', kind: 'PersistentVolumeClaim', metadata: { name: 'data-one' }, spec: { accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '1Gi' } } } });
    const cr = await kubectlFixture(['create', '--validate=false', '-f', claim]);
    expect(cr.stdout + cr.stderr).toContain('persistentvolumeclaim/data-one created');
    const pod = manifest('pod', workspacePod('ws-one', 'data-one'));
    expect((await kubectlFixture(['create', '--validate=false', '-f', pod])).stdout).toContain('pod/ws-one created');
    await until(async () => ((await kubectlFixture(['get', 'pod', 'ws-one', '-o', 'jsonpath={.status.phase}'])).stdout === 'Running' ? true : undefined), 'ws-one Running');
    const again = await kubectlFixture(['create', '--validate=false', '-f', pod]);
    expect(again.code).not.toBe(0);
    expect(again.stderr).toContain('AlreadyExists');
    const missing = await kubectlFixture(['get', 'pod', 'nope']);
    expect(missing.code).not.toBe(0);
    expect(missing.stderr).toContain('pods "nope" not found');
    const list = await kubectlFixture(['get', 'pods', '-l', 'app=atelier-workspace', '-o', 'name']);
    expect(list.stdout.trim()).toBe('pod/ws-one');
  });

  it('exec runs a real process in the pod: stdout, stderr, the exit code, the pod environment', async () => {
    const r = await kubectlFixture(['exec', 'ws-one', '--', 'sh', '-c', 'echo out $GREETING $(id -u) $(pwd); echo err >&2; exit 3']);
    expect(r.stdout, r.stderr).toBe('out from-the-pod-spec 1000 /workspace\n');
    expect(r.stderr).toContain('err\n');
    expect(r.code).toBe(3);
  });

  it('exec -i streams stdin to the process and closes it (v5 close frame)', async () => {
    const r = await kubectlFixture(['exec', '-i', 'ws-one', '--', 'sh', '-c', 'wc -c; echo done'], 'x'.repeat(100_000));
    expect(r.stdout).toBe('100000\ndone\n');
    expect(r.code).toBe(0);
  });

  it('exec over v4.channel.k8s.io (no close frame): output, then the status with the exit code on channel 3', async () => {
    const u = new URL(`/api/v1/namespaces/default/pods/ws-one/exec?command=sh&command=-c&command=echo%20v4;exit%205&stdout=true&stderr=true`, api.url.replace('http', 'ws'));
    const ws = new WebSocket(u, ['v4.channel.k8s.io'], { headers: { authorization: `Bearer ${api.token}` }, ca: api.ca });
    const frames: Buffer[] = [];
    ws.on('message', (d: Buffer) => frames.push(d));
    await new Promise((resolve) => ws.on('close', resolve));
    expect(ws.protocol).toBe('v4.channel.k8s.io');
    const out = Buffer.concat(frames.filter((f) => f[0] === 1).map((f) => f.subarray(1))).toString();
    expect(out).toBe('v4\n');
    const status = JSON.parse(frames.find((f) => f[0] === 3)!.subarray(1).toString());
    expect(status).toMatchObject({ status: 'Failure', reason: 'NonZeroExitCode', details: { causes: [{ reason: 'ExitCode', message: '5' }] } });
  });

  it('refuses a WebSocket client offering no supported channel protocol', async () => {
    const ws = new WebSocket(`${api.url.replace('http', 'ws')}/api/v1/namespaces/default/pods/ws-one/exec?command=true`, ['channel.k8s.io'], { headers: { authorization: `Bearer ${api.token}` }, ca: api.ca });
    const status = await new Promise<number>((resolve) => ws.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0)));
    expect(status).toBe(400);
  });

  it('a pod that runs a command once: logs, then Succeeded; watch -w sees it come and go', async () => {
    const watch = spawn('kubectl', ['--kubeconfig', api.kubeconfig, 'get', 'pods', '-w', '--output-watch-events', '-o', 'json'], { env: { ...process.env, HOME: path.dirname(api.kubeconfig) } });
    let seen = '';
    let watchErr = '';
    watch.stdout.on('data', (d) => (seen += d));
    watch.stderr.on('data', (d) => (watchErr += d));
    // -o json --output-watch-events: one compact WatchEvent document a line.
    const events = (): string[] => seen.split('\n').filter(Boolean).map((l) => {
      const e = JSON.parse(l) as { type: string; object: { metadata: { name: string } } };
      return `${e.type} ${e.object.metadata.name}`;
    });
    try {
      await until(async () => (seen.includes('"name":"ws-one"') ? true : undefined), 'the watch to list ws-one', 20_000).catch((e) => {
        throw new Error(`${e.message}: ${seen} ${watchErr}`);
      });
      const pod = manifest('job', { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'once' }, spec: { restartPolicy: 'Never', containers: [{ name: 'main', image: 'x', command: ['sh', '-c', 'echo hello; echo bye'] }] } });
      expect((await kubectlFixture(['create', '--validate=false', '-f', pod])).code).toBe(0);
      await until(async () => ((await kubectlFixture(['get', 'pod', 'once', '-o', 'jsonpath={.status.phase}'])).stdout === 'Succeeded' ? true : undefined), 'once Succeeded', 20_000);
      expect((await kubectlFixture(['logs', 'once'])).stdout).toBe('hello\nbye\n');
      expect((await kubectlFixture(['delete', 'pod', 'once'])).stdout).toContain('pod "once" deleted');
      await until(async () => (events().includes('DELETED once') ? true : undefined), 'the watch to see once deleted', 20_000).catch((e) => {
        throw new Error(`${e.message}: ${seen} ${watchErr}`);
      });
      expect(events().filter((e) => e.endsWith(' once'))).toEqual(['ADDED once', ...events().filter((e) => e === 'MODIFIED once'), 'DELETED once']);
    } finally {
      watch.kill();
    }
  });

  it('a watch from a compacted resourceVersion ends with a 410 Expired event', async () => {
    const rv = Number(api.store.resourceVersion);
    api.store.compact();
    const r = await execFileP('kubectl', ['--kubeconfig', api.kubeconfig, 'get', '--raw', `/api/v1/namespaces/default/pods?watch=1&resourceVersion=${rv - 1}`]);
    const ev = JSON.parse(r.stdout.trim().split('\n')[0]!);
    expect(ev).toMatchObject({ type: 'ERROR', object: { kind: 'Status', code: 410, reason: 'Expired' } });
  });

  it('deleting the workspace pod ends its sandbox', async () => {
    expect((await kubectlFixture(['delete', 'pod', 'ws-one'])).code).toBe(0);
    expect(api.runtime.running('default', 'ws-one')).toBe(false);
    expect((await kubectlFixture(['get', 'pods', '-o', 'name'])).stdout).toBe('');
  });
});
