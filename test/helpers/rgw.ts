/**
 * A private Ceph RADOS Gateway (a real S3 implementation) for tests, the chaos run and the bench:
 * one monitor, one OSD on `memstore` (objects live in the OSD's memory) and `radosgw` with its
 * beast frontend, all on 127.0.0.1 on free ports, with their files under a fresh temp folder.
 * No manager daemon: nothing here needs one.
 *
 * Needs Debian's `ceph-mon`, `ceph-osd` and `radosgw` packages (`.ci/run` installs them). When
 * they are missing `startRgw` throws an error that says so: callers fail rather than skip.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CreateBucketCommand, S3Client } from '@aws-sdk/client-s3';
import { S3ObjectStore, S3_COMPATIBLE_CLIENT_SETTINGS } from '../../shared/store/s3/index.js';
import { freePort } from './redis-server.js';

/** The three daemons, the admin tools (Debian: packages of the same names, plus ceph-common) and util-linux's setpriv. */
const BINARIES = ['ceph-mon', 'ceph-osd', 'radosgw', 'monmaptool', 'ceph', 'radosgw-admin', 'setpriv'] as const;
export const RGW_INSTALL_HINT =
  'apt-get install -y --no-install-recommends radosgw ceph-mon ceph-osd (.ci/run does this)';
/** Bounds on a loaded 2-core machine; an idle one starts in about 2 s. */
const START_TIMEOUT_MS = 90_000;
const TOOL_TIMEOUT_MS = 30_000;
const STOP_TIMEOUT_MS = 5_000;
const POLL_MS = 50;
/** Enough of a daemon's log to explain a failed start. */
const LOG_TAIL_CHARS = 3_000;
const BUCKET = 'test-bucket';
const REGION = 'us-east-1';

export interface RgwMemory {
  /** Resident set size in bytes of each daemon (0 if it is not running). */
  mon: number;
  osd: number;
  rgw: number;
  total: number;
}

export interface RgwServer {
  /** `http://127.0.0.1:<port>` */
  endpoint: string;
  /** A bucket that already exists. */
  bucket: string;
  region: string;
  accessKeyId: string;
  secretAccessKey: string;
  /** The cluster's temp folder (config, keyring, mon store, logs). */
  dir: string;
  /** Wall time from nothing to an S3 endpoint with a user and a bucket. */
  startupMs: number;
  /** The pids of the running daemons (the gateway's changes across `restartGateway`). */
  pids(): { mon: number; osd: number; rgw: number };
  /** RSS of each daemon, from /proc. */
  memory(): RgwMemory;
  /** `kill -9` the gateway (mon and OSD stay up, so every stored object survives). */
  killGateway(): Promise<void>;
  /** Starts the gateway again on the same port; resolves when it answers S3. */
  restartGateway(): Promise<void>;
  /** Kills every daemon by pid and deletes `dir`. Idempotent. */
  close(): Promise<void>;
}

/** The first missing binary, or undefined when everything needed is on the PATH. */
export function missingRgwBinary(): string | undefined {
  const dirs = (process.env.PATH ?? '').split(':').filter((d) => d !== '');
  return BINARIES.find((b) => !dirs.some((d) => existsSync(join(d, b))));
}

/** A Ceph key as the keyring wants it: base64 of {u16 type = 1 (AES), u32 sec, u32 nsec, u16 len = 16, secret}. */
function cephKey(): string {
  const b = Buffer.alloc(28);
  b.writeUInt16LE(1, 0);
  b.writeUInt32LE(Math.floor(Date.now() / 1000), 2);
  b.writeUInt32LE(0, 6);
  b.writeUInt16LE(16, 10);
  randomBytes(16).copy(b, 12);
  return b.toString('base64');
}

/** One keyring with every entity; `ceph-mon --mkfs` loads them all into the monitor's auth database. */
function keyring(): string {
  const entities: [string, Record<string, string>][] = [
    ['mon.', { mon: 'allow *' }],
    ['client.admin', { mon: 'allow *', osd: 'allow *', mgr: 'allow *' }],
    ['osd.0', { mon: 'allow profile osd', osd: 'allow *' }],
    ['client.rgw', { mon: 'allow rw', osd: 'allow rwx' }],
  ];
  return (
    entities
      .map(([name, caps]) =>
        [`[${name}]`, `\tkey = ${cephKey()}`, ...Object.entries(caps).map(([k, v]) => `\tcaps ${k} = "${v}"`)].join(
          '\n',
        ),
      )
      .join('\n') + '\n'
  );
}

function cephConf(o: { dir: string; fsid: string; monPort: number; rgwPort: number }): string {
  return `[global]
fsid = ${o.fsid}
mon host = v2:127.0.0.1:${o.monPort}
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind msgr1 = false
keyring = ${o.dir}/keyring
run dir = ${o.dir}/run
admin socket = ${o.dir}/run/$name.asok
log file = ${o.dir}/log/$name.log
crash dir = ${o.dir}/crash
# One OSD: pools of one replica, placed on that OSD alone.
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
osd crush chooseleaf type = 0
osd pool default pg num = 8
osd pool default pgp num = 8
mon max pg per osd = 1000
# Paxos commits every 50 ms instead of every second: start-up takes ~2 s instead of ~14 s.
paxos propose interval = 0.05
paxos min wait = 0.01
# A shared machine's disk may be fuller than Ceph's 30 % warning line; the store is in memory anyway.
mon data avail warn = 2
mon data avail crit = 1
[mon]
mon data = ${o.dir}/mon
[osd]
osd data = ${o.dir}/osd
osd objectstore = memstore
[client.rgw]
# tcp_nodelay: without it every small GET waits ~40 ms for delayed ACKs.
rgw frontends = beast endpoint=127.0.0.1:${o.rgwPort} tcp_nodelay=1
rgw thread pool size = 64
debug rgw = 0/5
`;
}

/** Runs an admin tool with a time bound; the error carries its stderr. */
function tool(cmd: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(
      cmd,
      args,
      { timeout: TOOL_TIMEOUT_MS, killSignal: 'SIGKILL', encoding: 'utf8' },
      (err, stdout, stderr) => {
        if (err)
          reject(
            new Error(`${cmd} ${args.slice(0, 3).join(' ')} failed: ${err.message}\n${stderr.slice(-LOG_TAIL_CHARS)}`),
          );
        else resolve(stdout);
      },
    );
  });
}

/**
 * Starts a daemon in the foreground. `setpriv --pdeathsig SIGKILL` execs it with a parent-death
 * signal, so the daemon is the child itself (its pid is the one we kill) and it dies with this
 * process even when `close()` is never reached (a killed test worker).
 */
function daemon(cmd: string, args: string[]): ChildProcess {
  const child = spawn('setpriv', ['--pdeathsig', 'SIGKILL', '--', cmd, '-f', ...args], { stdio: 'ignore' });
  child.on('error', () => undefined);
  return child;
}

const alive = (c: ChildProcess | undefined): c is ChildProcess =>
  c !== undefined && c.exitCode === null && c.signalCode === null;

async function killByPid(c: ChildProcess | undefined): Promise<void> {
  if (!alive(c)) return;
  const exited = once(c, 'exit');
  c.kill('SIGKILL');
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([exited, new Promise((r) => (timer = setTimeout(r, STOP_TIMEOUT_MS)))]);
  clearTimeout(timer);
}

function rssBytes(c: ChildProcess | undefined): number {
  if (!alive(c) || c.pid === undefined) return 0;
  try {
    const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${c.pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}

function logTail(dir: string, name: string): string {
  try {
    return readFileSync(join(dir, 'log', `${name}.log`), 'utf8').slice(-LOG_TAIL_CHARS);
  } catch {
    return '(no log)';
  }
}

/**
 * Starts a private Ceph cluster with a gateway, creates an S3 user (random keys) and one
 * bucket, and returns the endpoint. Every wait is bounded; a failure kills what was started,
 * removes the folder and names the daemon that did not come up, with its log's tail.
 */
export async function startRgw(): Promise<RgwServer> {
  const missing = missingRgwBinary();
  if (missing !== undefined) throw new Error(`Ceph RGW tests need ${missing} on the PATH: ${RGW_INSTALL_HINT}`);
  const started = performance.now();
  const deadline = Date.now() + START_TIMEOUT_MS;
  const dir = await mkdtemp(join(tmpdir(), 'ingest-rgw-'));
  const [monPort, rgwPort] = [await freePort(), await freePort()];
  const conf = join(dir, 'ceph.conf');
  const endpoint = `http://127.0.0.1:${rgwPort}`;
  const accessKeyId = `RGW${randomBytes(8).toString('hex').toUpperCase()}`;
  const secretAccessKey = randomBytes(20).toString('hex');
  const procs: { mon?: ChildProcess; osd?: ChildProcess; rgw?: ChildProcess } = {};

  let closing: Promise<void> | undefined;
  const close = (): Promise<void> => {
    closing ??= (async () => {
      // Gateway first, so it never sees its cluster vanish while answering.
      for (const c of [procs.rgw, procs.osd, procs.mon]) await killByPid(c).catch(() => undefined);
      await rm(dir, { recursive: true, force: true }).catch(() => undefined);
    })();
    return closing;
  };

  const check = (name: 'mon' | 'osd' | 'rgw', logName: string): void => {
    const c = procs[name];
    if (c !== undefined && (c.exitCode !== null || c.signalCode !== null))
      throw new Error(
        `${name} exited (code ${String(c.exitCode)}, signal ${String(c.signalCode)}) during start:\n${logTail(dir, logName)}`,
      );
  };
  const untilAnswers = async (what: string, logName: string, until: number): Promise<void> => {
    for (;;) {
      check('mon', 'mon.a');
      check('osd', 'osd.0');
      check('rgw', 'client.rgw');
      try {
        const r = await fetch(endpoint, { signal: AbortSignal.timeout(2000) });
        await r.arrayBuffer();
        // Anonymous ListBuckets: 200 with an empty list once the gateway serves S3.
        if (r.status < 500) return;
      } catch {
        /* not listening yet */
      }
      if (Date.now() > until)
        throw new Error(
          `${what} did not answer on ${endpoint} within ${START_TIMEOUT_MS} ms:\n${logTail(dir, logName)}`,
        );
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
  };
  const startGateway = async (until: number): Promise<void> => {
    procs.rgw = daemon('radosgw', ['-c', conf, '-n', 'client.rgw']);
    await untilAnswers('radosgw', 'client.rgw', until);
  };

  try {
    const fsid = randomUUID();
    await Promise.all(['run', 'log', 'crash', 'mon', 'osd'].map((d) => mkdir(join(dir, d))));
    await writeFile(conf, cephConf({ dir, fsid, monPort, rgwPort }));
    await writeFile(join(dir, 'keyring'), keyring(), { mode: 0o600 });
    await tool('monmaptool', [
      '--create',
      '--addv',
      'a',
      `[v2:127.0.0.1:${monPort}]`,
      '--fsid',
      fsid,
      join(dir, 'monmap'),
    ]);
    await tool('ceph-mon', ['-c', conf, '--mkfs', '-i', 'a', '--monmap', join(dir, 'monmap')]);
    procs.mon = daemon('ceph-mon', ['-c', conf, '-i', 'a']);
    // Registers OSD 0 in the cluster map (waits for the monitor to form its quorum of one).
    const osdUuid = randomUUID();
    const id = (
      await tool('ceph', ['-c', conf, '--connect-timeout', String(TOOL_TIMEOUT_MS / 1000), 'osd', 'new', osdUuid])
    ).trim();
    if (id !== '0') throw new Error(`ceph osd new returned ${JSON.stringify(id)}, expected 0`);
    // --no-mon-config: mkfs must not wait for configuration from the monitor.
    await tool('ceph-osd', ['-c', conf, '--mkfs', '-i', '0', '--osd-uuid', osdUuid, '--no-mon-config']);
    procs.osd = daemon('ceph-osd', ['-c', conf, '-i', '0']);
    await startGateway(deadline);
    await tool('radosgw-admin', [
      '-c',
      conf,
      'user',
      'create',
      '--uid',
      'ingest-tests',
      '--display-name',
      'events-ingest tests',
      '--access-key',
      accessKeyId,
      '--secret-key',
      secretAccessKey,
    ]);
    const client = new S3Client({
      region: REGION,
      endpoint,
      forcePathStyle: true,
      credentials: { accessKeyId, secretAccessKey },
      maxAttempts: 5,
      ...S3_COMPATIBLE_CLIENT_SETTINGS,
    });
    try {
      await client.send(new CreateBucketCommand({ Bucket: BUCKET }));
    } finally {
      client.destroy();
    }
  } catch (err) {
    // A daemon that died (a port taken between choosing and binding it, say) explains an admin
    // tool's timeout better than the tool does.
    let cause = err as Error;
    try {
      for (const [name, logName] of [
        ['mon', 'mon.a'],
        ['osd', 'osd.0'],
        ['rgw', 'client.rgw'],
      ] as const)
        check(name, logName);
    } catch (died) {
      cause = new Error(`${cause.message}\n${(died as Error).message}`, { cause: err });
    }
    await close();
    throw cause;
  }
  const startupMs = performance.now() - started;

  return {
    endpoint,
    bucket: BUCKET,
    region: REGION,
    accessKeyId,
    secretAccessKey,
    dir,
    startupMs,
    pids: () => ({ mon: procs.mon?.pid ?? -1, osd: procs.osd?.pid ?? -1, rgw: procs.rgw?.pid ?? -1 }),
    memory() {
      const m = { mon: rssBytes(procs.mon), osd: rssBytes(procs.osd), rgw: rssBytes(procs.rgw) };
      return { ...m, total: m.mon + m.osd + m.rgw };
    },
    killGateway: () => killByPid(procs.rgw),
    async restartGateway() {
      if (alive(procs.rgw)) throw new Error('restartGateway: the gateway is still running (killGateway first)');
      const until = Date.now() + START_TIMEOUT_MS;
      // The old process' listening socket can linger a moment after SIGKILL; a gateway that
      // fails to bind exits, so try again until the deadline.
      for (;;) {
        try {
          await startGateway(until);
          return;
        } catch (err) {
          if (Date.now() > until) throw err;
          await killByPid(procs.rgw);
          await new Promise((r) => setTimeout(r, 200));
        }
      }
    },
    close,
  };
}

/** An `S3ObjectStore` on the gateway's bucket, optionally under a key prefix. */
export function rgwStoreFor(
  server: Pick<RgwServer, 'endpoint' | 'bucket' | 'region' | 'accessKeyId' | 'secretAccessKey'>,
  prefix?: string,
): S3ObjectStore {
  return new S3ObjectStore({
    bucket: server.bucket,
    prefix,
    endpoint: server.endpoint,
    region: server.region,
    forcePathStyle: true,
    credentials: { accessKeyId: server.accessKeyId, secretAccessKey: server.secretAccessKey },
  });
}

/** The environment that points the product's services (`STORE=s3`) at the gateway. */
export function rgwEnv(
  server: Pick<RgwServer, 'endpoint' | 'bucket' | 'region' | 'accessKeyId' | 'secretAccessKey'>,
  endpoint = server.endpoint,
): Record<string, string> {
  return {
    STORE: 's3',
    S3_BUCKET: server.bucket,
    S3_ENDPOINT: endpoint,
    S3_REGION: server.region,
    S3_FORCE_PATH_STYLE: 'true',
    AWS_ACCESS_KEY_ID: server.accessKeyId,
    AWS_SECRET_ACCESS_KEY: server.secretAccessKey,
  };
}
