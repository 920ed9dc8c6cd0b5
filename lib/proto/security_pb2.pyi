from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LoginRequest(_message.Message):
    __slots__ = ("user", "password", "api_key", "on_behalf_of")
    USER_FIELD_NUMBER: _ClassVar[int]
    PASSWORD_FIELD_NUMBER: _ClassVar[int]
    API_KEY_FIELD_NUMBER: _ClassVar[int]
    ON_BEHALF_OF_FIELD_NUMBER: _ClassVar[int]
    user: str
    password: str
    api_key: str
    on_behalf_of: str
    def __init__(self, user: _Optional[str] = ..., password: _Optional[str] = ..., api_key: _Optional[str] = ..., on_behalf_of: _Optional[str] = ...) -> None: ...

class LoginResponse(_message.Message):
    __slots__ = ("token", "expires_ms", "principal", "roles")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_MS_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    token: str
    expires_ms: int
    principal: str
    roles: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, token: _Optional[str] = ..., expires_ms: _Optional[int] = ..., principal: _Optional[str] = ..., roles: _Optional[_Iterable[str]] = ...) -> None: ...

class UserInfo(_message.Message):
    __slots__ = ("name", "kind", "roles", "created_ms", "updated_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: str
    roles: _containers.RepeatedScalarFieldContainer[str]
    created_ms: int
    updated_ms: int
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[str] = ..., roles: _Optional[_Iterable[str]] = ..., created_ms: _Optional[int] = ..., updated_ms: _Optional[int] = ...) -> None: ...

class AddUserRequest(_message.Message):
    __slots__ = ("name", "password", "roles", "service")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PASSWORD_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    name: str
    password: str
    roles: _containers.RepeatedScalarFieldContainer[str]
    service: bool
    def __init__(self, name: _Optional[str] = ..., password: _Optional[str] = ..., roles: _Optional[_Iterable[str]] = ..., service: _Optional[bool] = ...) -> None: ...

class ListUsersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListUsersResponse(_message.Message):
    __slots__ = ("users",)
    USERS_FIELD_NUMBER: _ClassVar[int]
    users: _containers.RepeatedCompositeFieldContainer[UserInfo]
    def __init__(self, users: _Optional[_Iterable[_Union[UserInfo, _Mapping]]] = ...) -> None: ...

class SetPasswordRequest(_message.Message):
    __slots__ = ("name", "password")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PASSWORD_FIELD_NUMBER: _ClassVar[int]
    name: str
    password: str
    def __init__(self, name: _Optional[str] = ..., password: _Optional[str] = ...) -> None: ...

class SetRolesRequest(_message.Message):
    __slots__ = ("name", "roles")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    name: str
    roles: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., roles: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteUserRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ApiKeyInfo(_message.Message):
    __slots__ = ("key_id", "principal", "description", "created_ms")
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    key_id: str
    principal: str
    description: str
    created_ms: int
    def __init__(self, key_id: _Optional[str] = ..., principal: _Optional[str] = ..., description: _Optional[str] = ..., created_ms: _Optional[int] = ...) -> None: ...

class CreateApiKeyRequest(_message.Message):
    __slots__ = ("principal", "description")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    principal: str
    description: str
    def __init__(self, principal: _Optional[str] = ..., description: _Optional[str] = ...) -> None: ...

class CreateApiKeyResponse(_message.Message):
    __slots__ = ("info", "api_key")
    INFO_FIELD_NUMBER: _ClassVar[int]
    API_KEY_FIELD_NUMBER: _ClassVar[int]
    info: ApiKeyInfo
    api_key: str
    def __init__(self, info: _Optional[_Union[ApiKeyInfo, _Mapping]] = ..., api_key: _Optional[str] = ...) -> None: ...

class ListApiKeysRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListApiKeysResponse(_message.Message):
    __slots__ = ("keys",)
    KEYS_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedCompositeFieldContainer[ApiKeyInfo]
    def __init__(self, keys: _Optional[_Iterable[_Union[ApiKeyInfo, _Mapping]]] = ...) -> None: ...

class RevokeApiKeyRequest(_message.Message):
    __slots__ = ("key_id",)
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    key_id: str
    def __init__(self, key_id: _Optional[str] = ...) -> None: ...

class RotateSigningKeyRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RotateSigningKeyResponse(_message.Message):
    __slots__ = ("key_id", "retired")
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    RETIRED_FIELD_NUMBER: _ClassVar[int]
    key_id: str
    retired: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, key_id: _Optional[str] = ..., retired: _Optional[_Iterable[str]] = ...) -> None: ...

class AclEntry(_message.Message):
    __slots__ = ("principal", "resource", "name", "operation", "effect", "pattern")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    principal: str
    resource: str
    name: str
    operation: str
    effect: str
    pattern: str
    def __init__(self, principal: _Optional[str] = ..., resource: _Optional[str] = ..., name: _Optional[str] = ..., operation: _Optional[str] = ..., effect: _Optional[str] = ..., pattern: _Optional[str] = ...) -> None: ...

class AclChange(_message.Message):
    __slots__ = ("entry", "changed", "version")
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    entry: AclEntry
    changed: bool
    version: int
    def __init__(self, entry: _Optional[_Union[AclEntry, _Mapping]] = ..., changed: _Optional[bool] = ..., version: _Optional[int] = ...) -> None: ...

class ListAclsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AclSet(_message.Message):
    __slots__ = ("version", "entries")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    version: int
    entries: _containers.RepeatedCompositeFieldContainer[AclEntry]
    def __init__(self, version: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[AclEntry, _Mapping]]] = ...) -> None: ...

class QuotaEntry(_message.Message):
    __slots__ = ("entity", "produce_bytes_per_s", "consume_bytes_per_s")
    ENTITY_FIELD_NUMBER: _ClassVar[int]
    PRODUCE_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    CONSUME_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    entity: str
    produce_bytes_per_s: int
    consume_bytes_per_s: int
    def __init__(self, entity: _Optional[str] = ..., produce_bytes_per_s: _Optional[int] = ..., consume_bytes_per_s: _Optional[int] = ...) -> None: ...

class ListQuotasRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class QuotaSet(_message.Message):
    __slots__ = ("version", "entries")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    version: int
    entries: _containers.RepeatedCompositeFieldContainer[QuotaEntry]
    def __init__(self, version: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[QuotaEntry, _Mapping]]] = ...) -> None: ...

class IpRule(_message.Message):
    __slots__ = ("network", "effect", "scope", "name", "pattern")
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    network: str
    effect: str
    scope: str
    name: str
    pattern: str
    def __init__(self, network: _Optional[str] = ..., effect: _Optional[str] = ..., scope: _Optional[str] = ..., name: _Optional[str] = ..., pattern: _Optional[str] = ...) -> None: ...

class IpRuleRequest(_message.Message):
    __slots__ = ("rule", "force")
    RULE_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    rule: IpRule
    force: bool
    def __init__(self, rule: _Optional[_Union[IpRule, _Mapping]] = ..., force: _Optional[bool] = ...) -> None: ...

class IpRuleChange(_message.Message):
    __slots__ = ("changed", "version")
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    changed: bool
    version: int
    def __init__(self, changed: _Optional[bool] = ..., version: _Optional[int] = ...) -> None: ...

class ListIpRulesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class IpRuleSet(_message.Message):
    __slots__ = ("version", "entries")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    version: int
    entries: _containers.RepeatedCompositeFieldContainer[IpRule]
    def __init__(self, version: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[IpRule, _Mapping]]] = ...) -> None: ...

class ScramStepRequest(_message.Message):
    __slots__ = ("message", "exchange", "on_behalf_of")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    EXCHANGE_FIELD_NUMBER: _ClassVar[int]
    ON_BEHALF_OF_FIELD_NUMBER: _ClassVar[int]
    message: bytes
    exchange: str
    on_behalf_of: str
    def __init__(self, message: _Optional[bytes] = ..., exchange: _Optional[str] = ..., on_behalf_of: _Optional[str] = ...) -> None: ...

class ScramStepResponse(_message.Message):
    __slots__ = ("message", "exchange", "done", "token", "expires_ms", "principal")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    EXCHANGE_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_MS_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    message: bytes
    exchange: str
    done: bool
    token: str
    expires_ms: int
    principal: str
    def __init__(self, message: _Optional[bytes] = ..., exchange: _Optional[str] = ..., done: _Optional[bool] = ..., token: _Optional[str] = ..., expires_ms: _Optional[int] = ..., principal: _Optional[str] = ...) -> None: ...
