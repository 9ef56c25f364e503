/**
 * The records of skills (docs/extensions.md): a skill as read, its source and files, the
 * workspace's skill sets and overrides, a listed skill, the source roots and what SkillService
 * is given.
 */
import { fileURLToPath } from 'node:url';
import type { DB } from '../../store/db.js';
import type { AuditLog } from '../instance/index.js';
import type { CursorCodec } from '../../core/cursor.js';
import { ServiceError } from '../../core/errors.js';
import type { Executor } from '../../sandbox/executor.js';
import type { WorkspaceService } from '../workspaces/index.js';
import type { ApprovalService } from '../approvals.js';
import {
  type SkillFileInfo,
  type SkillMeta,
  type SkillSource,
} from './format.js';

/** Atelier's own skills directory (skills/ at the repository root; dist/services/extensions -> ../../../skills). */
export const BUILTIN_SKILLS_DIR = fileURLToPath(new URL('../../../skills/', import.meta.url));

/** Where repository skills are looked for, in this order (first found wins a name within the source). */
export const REPOSITORY_SKILL_ROOTS = ['.agents/skills', '.claude/skills', '.github/skills', 'skills'] as const;
export const WORKSPACE_SKILL_ROOTS = ['.atelier/skills'] as const;

/** Bounds of one scan of a source: directory listings, skills. */
export const SCAN_LISTINGS = 400;
export const SCAN_SKILLS = 100;
export const SKIP_DIRS = new Set(['.git', 'node_modules']);

export interface Skill {
  name: string;
  source: SkillSource;
  /** Where it lives: the directory in the checkout, "skills/<dir>" in Atelier, or "owner:<name>". */
  location: string;
  meta: SkillMeta;
  files: SkillFileInfo[];
  sha256: string;
  scripts: string[];
  problems: string[];
  usable: boolean;
}

export interface SkillSetSel {
  name: SkillSource;
  include?: string[];
  exclude?: string[];
}
export interface SkillOverride {
  disabled?: boolean;
  source?: SkillSource;
}
export interface WorkspaceSkillConfig {
  skillSets: SkillSetSel[];
  skillOverrides: Record<string, SkillOverride>;
}

export interface ListedSkill {
  skill: Skill;
  active: boolean;
  shadowedBy?: { source: SkillSource; location: string };
  disabled?: boolean;
}

export interface Deps {
  db: DB;
  audit: AuditLog;
  cursors: CursorCodec;
  executor: Executor;
  workspaces: WorkspaceService;
  approvals: ApprovalService;
  builtinDir?: string;
}

export interface DaemonEntry {
  name: string;
  path: string;
  type: string;
  size: number;
}

export const isNotThere = (e: unknown) => e instanceof ServiceError && ['NOT_FOUND', 'FAILED_PRECONDITION', 'PERMISSION_DENIED', 'INVALID_ARGUMENT'].includes(e.code);

/** File contents of a skill, keyed by path relative to the skill directory. */
export type Contents = Map<string, Buffer>;
