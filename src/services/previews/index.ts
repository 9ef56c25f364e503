/**
 * services/previews (the door of this domain: other domains and the layers above import only this file)
 */
export * from './http-gate.js';
export * from './links.js';
