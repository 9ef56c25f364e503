/**
 * services/git (the door of this domain: other domains and the layers above import only this file)
 */
export * from './ephemeral.js';
export * from './local.js';
export * from './safety.js';
