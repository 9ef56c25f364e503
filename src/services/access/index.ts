/**
 * services/access (the door of this domain: other domains and the layers above import only this file)
 */
export * from './login-throttle.js';
export * from './oauth.js';
export * from './principals.js';
export * from './token-cache.js';
export * from './tokens.js';
