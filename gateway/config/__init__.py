"""Configuration: schema (frozen dataclasses), defaults (methods, networks, plans) and
load (TOML -> env -> reject unknown keys -> defaults -> validate).

The public names are re-exported here, so ``from gateway.config import X`` is the one
way callers reach them. Everything else of gateway imports this package.

May import: nothing.
"""

from gateway.config.addresses import listen_address
from gateway.config.admin import AdminConfig, AdminToken
from gateway.config.alerts import AlertsConfig
from gateway.config.defaults import (
    DEFAULT_METHODS,
    DEFAULT_NETWORKS,
    DEFAULT_PLANS,
    FORBIDDEN_METHOD_PREFIXES,
)
from gateway.config.head import HeadConfig
from gateway.config.listening import FiltersConfig, WsConfig
from gateway.config.load import (
    config_from_dict,
    load_config,
    read_toml,
    ws_url_for,
)
from gateway.config.methodset import MethodSet
from gateway.config.nodes import node_table
from gateway.config.nodeshape import MethodRoute, NodeConfig
from gateway.config.schema import (
    AdmissionConfig,
    BuilderConfig,
    CacheConfig,
    Config,
    ConfigError,
    DashboardConfig,
    HedgeConfig,
    InsightConfig,
    LimitsConfig,
    LogConfig,
    NetworkConfig,
    PlanConfig,
    RedisConfig,
    ServerConfig,
    UpstreamConfig,
    data_dir,
)
from gateway.config.tracing import TracingConfig

__all__ = [
    "DEFAULT_METHODS",
    "DEFAULT_NETWORKS",
    "DEFAULT_PLANS",
    "FORBIDDEN_METHOD_PREFIXES",
    "AdminConfig",
    "AdminToken",
    "AdmissionConfig",
    "AlertsConfig",
    "BuilderConfig",
    "CacheConfig",
    "Config",
    "ConfigError",
    "DashboardConfig",
    "FiltersConfig",
    "HeadConfig",
    "HedgeConfig",
    "InsightConfig",
    "LimitsConfig",
    "LogConfig",
    "MethodRoute",
    "MethodSet",
    "NetworkConfig",
    "NodeConfig",
    "PlanConfig",
    "RedisConfig",
    "ServerConfig",
    "TracingConfig",
    "UpstreamConfig",
    "WsConfig",
    "config_from_dict",
    "data_dir",
    "listen_address",
    "load_config",
    "node_table",
    "read_toml",
    "ws_url_for",
]
