import { createCipheriv, createDecipheriv, createHash, createHmac, hkdfSync, randomBytes, scrypt, timingSafeEqual } from 'node:crypto';
import { promisify } from 'node:util';
import { ServiceError } from './errors.js';

const scryptAsync = promisify(scrypt) as (pw: string, salt: Buffer, len: number, opts: object) => Promise<Buffer>;

/** Derives purpose-bound subkeys from the master key so no two uses share a key. */
export function deriveKey(master: Buffer, purpose: string): Buffer {
  return Buffer.from(hkdfSync('sha256', master, Buffer.alloc(0), `atelier:${purpose}`, 32));
}

/**
 * AES-256-GCM box for secrets at rest. Layout: "v1." + base64url(iv | tag | ciphertext).
 * The associated data binds a ciphertext to its row so a value cannot be swapped between rows.
 */
export class SecretBox {
  private readonly key: Buffer;
  constructor(master: Buffer) {
    this.key = deriveKey(master, 'secret-box');
  }

  seal(plain: string | Buffer, aad: string): string {
    const iv = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', this.key, iv);
    cipher.setAAD(Buffer.from(aad));
    const ct = Buffer.concat([cipher.update(plain), cipher.final()]);
    return 'v1.' + Buffer.concat([iv, cipher.getAuthTag(), ct]).toString('base64url');
  }

  open(sealed: string, aad: string): Buffer {
    if (!sealed.startsWith('v1.')) throw new ServiceError('INTERNAL', 'sealed secret has an unknown format');
    const raw = Buffer.from(sealed.slice(3), 'base64url');
    const decipher = createDecipheriv('aes-256-gcm', this.key, raw.subarray(0, 12));
    decipher.setAAD(Buffer.from(aad));
    decipher.setAuthTag(raw.subarray(12, 28));
    try {
      return Buffer.concat([decipher.update(raw.subarray(28)), decipher.final()]);
    } catch {
      throw new ServiceError('INTERNAL', 'a sealed secret failed its integrity check (wrong master key?)');
    }
  }
}

export function sha256Hex(data: string | Buffer): string {
  return createHash('sha256').update(data).digest('hex');
}

export function hmac(key: Buffer, data: string): Buffer {
  return createHmac('sha256', key).update(data).digest();
}

export function safeEqual(a: string | Buffer, b: string | Buffer): boolean {
  const ba = Buffer.isBuffer(a) ? a : Buffer.from(a);
  const bb = Buffer.isBuffer(b) ? b : Buffer.from(b);
  return ba.length === bb.length && timingSafeEqual(ba, bb);
}

const SCRYPT = { N: 16384, r: 8, p: 1 };

export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  const dk = await scryptAsync(password, salt, 32, SCRYPT);
  return `scrypt$${SCRYPT.N}$${SCRYPT.r}$${SCRYPT.p}$${salt.toString('base64url')}$${dk.toString('base64url')}`;
}

export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const [kind, n, r, p, salt, dk] = stored.split('$');
  if (kind !== 'scrypt' || !salt || !dk) return false;
  const got = await scryptAsync(password, Buffer.from(salt, 'base64url'), 32, { N: Number(n), r: Number(r), p: Number(p) });
  return safeEqual(got, Buffer.from(dk, 'base64url'));
}
