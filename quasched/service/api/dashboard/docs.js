// Starts Swagger UI (/docs) on this server's OpenAPI document; a file of its own, as the page's policy runs no
// inline script.
window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  deepLinking: true,
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
  layout: "BaseLayout",
  validatorUrl: null,
});
