/**
 * services/workspaces (the door of this domain: other domains and the layers above import only this file)
 */
export * from './lifecycle.js';
export * from './templates/builds.js';
