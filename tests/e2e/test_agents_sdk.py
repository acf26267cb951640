"""The OpenAI Agents SDK (PyPI openai-agents) against `shoal serve` with
Qwen2.5-Coder-0.5B, through its Chat Completions model: an agent with a
function tool and a structured output type. The SDK sends tool_choice
"required" for the first turn (a grammar-held call), runs the Python
function, then asks again with the tools and response_format json_schema
(strict) for the pydantic type; the reply must parse into it. The same
agent through the SDK's default Responses model: test_client_apis.py."""
import asyncio

from pydantic import BaseModel


class Weather(BaseModel):
    city: str
    temperature_celsius: int
    sunny: bool


def run_weather_agent(base, responses):
    """Asks the weather agent about Paris through the Responses model class
    (the SDK's default) or the Chat Completions one: (the cities its tool
    was called with, the run's final output)."""
    from agents import (Agent, ModelSettings, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner,
                        function_tool, set_tracing_disabled)
    from openai import AsyncOpenAI
    set_tracing_disabled(True)
    calls = []

    @function_tool
    def get_weather(city: str) -> str:
        """Returns the current weather in a city."""
        calls.append(city)
        return f"The weather in {city} is sunny, 21 degrees Celsius."

    async def run():
        client = AsyncOpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
        model_class = OpenAIResponsesModel if responses else OpenAIChatCompletionsModel
        agent = Agent(name="weather", instructions="Answer with the weather tool.", tools=[get_weather],
                      model=model_class(model="gpt-4o-mini", openai_client=client), output_type=Weather,
                      model_settings=ModelSettings(temperature=0, tool_choice="required"))
        return await Runner.run(agent, "What is the weather in Paris?", max_turns=4)

    return calls, asyncio.run(run()).final_output


def check_weather(calls, output):
    assert calls == ["Paris"]
    assert isinstance(output, Weather)
    assert output.city == "Paris" and output.temperature_celsius == 21


def test_agent_calls_a_function_tool_and_returns_structured_output(qwen):
    check_weather(*run_weather_agent(qwen.base, responses=False))
