/**
 * services/repos (the door of this domain: other domains and the layers above import only this file)
 */
export * from './broker.js';
export * from './credentials.js';
export * from './policy.js';
