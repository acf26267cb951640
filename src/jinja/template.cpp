#include "jinja/template.h"

#include "jinja/error.h"
#include "jinja/parser.h"

namespace shoal::jinja {

Template::Template(const std::string& source) : body_(std::make_shared<const Body>(parse(source))) {}

std::string Template::render(const nlohmann::ordered_json& context, const Limits& limits) const {
  try {
    std::unordered_map<std::string, Value> globals;
    if (context.is_object())
      for (const auto& [k, v] : context.items()) globals[k] = Value::from_json(v);
    Interpreter interpreter(limits, std::move(globals));
    return interpreter.render(*body_);
  } catch (const TemplateError&) {
    throw;
  } catch (const RenderFault& e) {
    throw TemplateError(std::string("template: ") + e.what());
  } catch (const std::exception& e) {
    throw TemplateError(std::string("template: ") + e.what());
  }
}

}  // namespace shoal::jinja
