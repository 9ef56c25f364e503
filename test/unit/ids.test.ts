/**
 * Identifiers keep the spec's shape (prefix + A-Za-z0-9_-) and end alphanumeric, so each is also a
 * Kubernetes label value: the Kubernetes driver labels a workspace's Pod, claim and NetworkPolicy
 * with its id (one in 32 ids used to end in - or _, and their objects then had no such label).
 */
import { describe, expect, it } from 'vitest';
import { ID_PREFIXES, newId, type IdKind } from '../../src/core/ids.js';
import { labelsFor } from '../../src/sandbox/kubernetes/names.js';

describe('newId', () => {
  it('every id of every kind has the spec shape and ends alphanumeric (a label value)', () => {
    for (const kind of Object.keys(ID_PREFIXES) as IdKind[]) {
      const ends = new Set<string>();
      for (let i = 0; i < 2000; i++) {
        const id = newId(kind);
        expect(id.startsWith(ID_PREFIXES[kind])).toBe(true);
        expect(id.slice(ID_PREFIXES[kind].length)).toMatch(/^[A-Za-z0-9_-]{23}[A-Za-z0-9]$/);
        ends.add(id.slice(-1));
      }
      // Still random at the end: drawn from the whole alphanumeric set, not a fixed character.
      expect(ends.size).toBeGreaterThan(40);
    }
  });

  it('a workspace id always becomes the workspace label of its Kubernetes objects', () => {
    for (let i = 0; i < 5000; i++) {
      const id = newId('workspace');
      expect(labelsFor(id, 'workspace')['atelier.dev/workspace']).toBe(id);
    }
  });
});
