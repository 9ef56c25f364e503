/**
 * services/instance (the door of this domain: other domains and the layers above import only this file)
 */
export * from './audit.js';
export * from './backups.js';
export * from './health.js';
export * from './idempotency.js';
